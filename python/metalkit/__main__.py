"""``python -m metalkit info | check FILE.metal | bench``."""
from __future__ import annotations

import argparse
import sys


def _info() -> int:
    import metalkit as mk
    d = mk.device()
    print(f"metalkit {mk.__version__}")
    print(f"device:   {d.name}")
    print(f"backend:  {d.backend}")
    if d.backend == "cpu":
        from .msl import cache, toolchain
        tc = toolchain.find()
        print(f"compiler: {tc.version()} ({tc.path})")
        print(f"cache:    {cache.cache_dir()}")
    return 0


def _check(path: str) -> int:
    import metalkit as mk
    try:
        lib = mk.load(path)
    except mk.CompileError as e:
        print(e.log if e.log else str(e), file=sys.stderr)
        return 1
    for name in lib.kernels:
        print(lib[name].signature)
    if not lib.kernels:
        print(f"{path}: no kernels")
    return 0


def _bench() -> int:
    from ._bench import report
    report()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m metalkit", description="metalkit command line")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="device, backend, compiler and cache location")
    c = sub.add_parser("check", help="compile a .metal file; print each kernel's signature or the errors")
    c.add_argument("file")
    sub.add_parser("bench", help="dispatch overhead and bandwidth on this device")
    args = p.parse_args(argv)
    from .errors import MetalkitError
    try:
        if args.cmd == "info":
            return _info()
        if args.cmd == "check":
            return _check(args.file)
        return _bench()
    except MetalkitError as e:  # a bad compiler or cache, an unknown device: one line, not a traceback
        print(f"python -m metalkit {args.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
