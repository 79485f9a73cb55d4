"""A C++ tokenizer for preprocessed text, line by line.

The input comes from ``clang -E``: comments are gone, continuation lines are
joined, and ``# N "file"`` markers say which file each line came from. Every
token keeps its line and column so rewrites can keep clang's diagnostics
pointing at the user's own source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<str>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\(.*?\)(?P=delim)"
          | (?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*"
          | (?:u8|u|U|L)?'(?:[^'\\\n]|\\.)*')
  | (?P<num>\.?[0-9](?:[eEpP][+-]|[0-9A-Za-z_.']|)*)
  | (?P<id>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<punct><=>|<<=|>>=|\.\.\.|->\*|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|\.\*|[{}\[\]()<>;:,.?~!+\-*/%&|^=#])
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass
class Token:
    text: str
    kind: str   # "id", "num", "str", "punct", "other"
    line: int   # index into the preprocessed text's lines
    col: int    # 0-based column in that line


def tokenize_line(text: str, line: int) -> list[Token]:
    out = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup if m.lastgroup != "delim" else "str"
        if kind == "ws":
            continue
        out.append(Token(m.group(), kind, line, m.start()))
    return out


_MARKER = re.compile(r'#\s*(?:line\s+)?(\d+)\s+"((?:[^"\\]|\\.)*)"')


def c_escape(s: str) -> str:
    """s as the inside of a C string literal (a file name in a ``#line`` marker or a call)."""
    return s.replace("\\", "\\\\").replace('"', '\\"')


def line_directive(line: int, file: str) -> str:
    """``#line line "file"``: what follows is that line of that file."""
    return f'#line {line} "{c_escape(file)}"'


def parse_marker(text: str) -> tuple[int, str] | None:
    """(line, file) of a ``# N "file"`` line marker, else None."""
    m = _MARKER.match(text.lstrip())
    if not m:
        return None
    return int(m.group(1)), m.group(2).encode().decode("unicode_escape")
