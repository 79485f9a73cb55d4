"""The one error of the SIMT transform: code it cannot rewrite, and where."""


class Unsupported(Exception):
    """Raised with the offending token; the kernel then runs as fibers and says why."""

    def __init__(self, tok: int, why: str):
        super().__init__(why)
        self.tok, self.why = tok, why
