"""Text to token ids and back with a GGUF vocabulary: pieces as SentencePiece writes them ("▁"
for a space, "<0xNN>" for a raw byte). Encoding takes the longest piece that matches at each
point, falling back to byte pieces: simple, and not always the split SentencePiece would make."""
from __future__ import annotations

import re

_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class Vocab:
    def __init__(self, tokens: list[str]):
        self.pieces = [self._bytes(t) for t in tokens]
        self.ids: dict[bytes, int] = {}
        for i, p in enumerate(self.pieces):
            self.ids.setdefault(p, i)
        self.longest = max(len(p) for p in self.pieces)

    @staticmethod
    def _bytes(token: str) -> bytes:
        m = _BYTE.fullmatch(token)
        return bytes([int(m.group(1), 16)]) if m else token.replace("\u2581", " ").encode()

    def encode(self, text: str) -> list[int]:
        data, out, i = text.encode(), [], 0
        while i < len(data):
            for n in range(min(self.longest, len(data) - i), 0, -1):
                if data[i:i + n] in self.ids:
                    out.append(self.ids[data[i:i + n]])
                    i += n
                    break
            else:
                raise ValueError(f"byte {data[i]:#04x} of the text has no token in this vocabulary")
        return out

    def decode(self, ids: list[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode(errors="replace")
