"""``defines=``: preprocessor macros for a compile, as source lines both backends read."""
from __future__ import annotations

import re
from typing import Mapping, Optional, Union

from ..errors import CompileError

Value = Optional[Union[str, int, float, bool]]
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")


def define_lines(defines: Mapping[str, Value] | None) -> str:
    """``#define`` lines for the macros, in a stable order (None or True: defined as 1)."""
    lines = []
    for name in sorted(defines or {}):
        value = defines[name]
        if not isinstance(name, str) or not _NAME.match(name):
            raise CompileError(f"defines: {name!r} is not a macro name; use an identifier such as 'USE_BF16'")
        if value is None or value is True:
            text = "1"
        elif value is False:
            text = "0"
        elif isinstance(value, (int, float)):
            text = repr(value)
        elif isinstance(value, str) and "\n" not in value:
            text = value
        else:
            raise CompileError(f"defines: the value of {name} must be a number, a bool, None or one line of text")
        lines.append(f"#define {name} {text}\n")
    return "".join(lines)
