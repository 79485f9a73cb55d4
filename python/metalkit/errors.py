"""metalkit's exceptions. Each message names the kernel, the parameter or source
line, and what to do."""
from __future__ import annotations


class MetalkitError(Exception):
    """Base class of every metalkit error."""


class CompileError(MetalkitError, SyntaxError):
    """MSL source did not compile. ``filename``, ``lineno`` and ``offset`` point
    at the user's own source; ``log`` holds the compiler's full text."""

    def __init__(self, message: str, *, filename: str | None = None, lineno: int | None = None,
                 offset: int | None = None, text: str | None = None, log: str = ""):
        SyntaxError.__init__(self, message, (filename, lineno, offset, text))
        self.log = log or message

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno}:{self.offset}: " if self.filename and self.lineno else ""
        detail = f"\n{self.log}" if self.log and self.log.strip() != self.msg.strip() else ""
        return f"{where}{self.msg}{detail}"

    def reworded(self, msg: str, *, filename: str | None = None, lineno: int | None = None,
                 text: str | None = None, log: str | None = None) -> "CompileError":
        """This error with another message and, where given, another place and log: how a caller
        names what it compiled (a kernel, a ``metal_kernel`` body) in an error raised below it.

        >>> e = CompileError("use of undeclared identifier 'y'", filename="k.metal", lineno=3, offset=5)
        >>> str(e.reworded(f"kernel 'k': {e.msg}"))
        "k.metal:3:5: kernel 'k': use of undeclared identifier 'y'"
        """
        return CompileError(msg, filename=self.filename if filename is None else filename,
                            lineno=self.lineno if lineno is None else lineno, offset=self.offset,
                            text=self.text if text is None else text,
                            log=(self.log if self.log != self.msg else "") if log is None else log)


class ArgumentError(MetalkitError, TypeError):
    """Arguments do not match the kernel (count, dtype, size, writability, range),
    or a metalkit function was given a value of the wrong type."""


class DispatchError(MetalkitError, ValueError):
    """Grid, threadgroup or threadgroup memory outside what the kernel allows."""


class KernelFault(MetalkitError, RuntimeError):
    """A fault found while the kernel ran (out of bounds, divergent barrier, GPU error)."""


class KernelNotFound(MetalkitError, KeyError, AttributeError):
    """No kernel of that name: ``lib["name"]``, ``lib.name``, ``metalkit.run("name")``.
    A ``KeyError`` and an ``AttributeError``, so ``hasattr`` and ``getattr(lib, name, None)`` work."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""  # KeyError would quote the message


class DeviceError(MetalkitError, ValueError):
    """An unknown backend or device setting, or a backend this machine does not have."""


class CacheError(MetalkitError, OSError):
    """Neither the kernel cache directory nor a private temporary one can be written."""


class MetalkitWarning(UserWarning):
    """Something metalkit worked around, such as a kernel cache it could not write."""


class CheckWarning(MetalkitWarning):
    """A finding of ``check=`` reported as a warning: code that relies on SIMD-group lockstep, or any
    finding under ``check="...,warn"``."""
