"""``metalkit`` (or ``python -m metalkit``) ``info | check FILE.metal | build FILE.metal | bench``."""
from __future__ import annotations

import argparse
import os
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


def _macros(defines: list[str]) -> dict[str, object]:
    """-D NAME[=VALUE] as compile()'s defines= (a bare NAME is 1, as with a C compiler)."""
    macros: dict[str, object] = {}
    for d in defines:
        name, eq, value = d.partition("=")
        macros[name] = value if eq else 1
    return macros


def _check(path: str, include_dirs: list[str], defines: list[str]) -> int:
    import metalkit as mk
    try:
        lib = mk.load(path, include_dirs=include_dirs, defines=_macros(defines))
    except mk.CompileError as e:
        print(e.log if e.log else str(e), file=sys.stderr)
        return 1
    for name in lib.kernels:
        print(lib[name].signature)
    if not lib.kernels:
        print(f"{path}: no kernels")
    return 0


def _build(path: str, include_dirs: list[str], defines: list[str], jobs: int | None) -> int:
    import time
    import metalkit as mk
    start = time.monotonic()
    try:
        lib = mk.load(path, include_dirs=include_dirs, defines=_macros(defines)).build(jobs=jobs)
    except mk.CompileError as e:
        print(e.log if e.log else str(e), file=sys.stderr)
        return 1
    print(f"{path}: {len(lib.kernels)} kernels ready in {time.monotonic() - start:.1f} s "
          f"({jobs or os.cpu_count()} compilers at a time)")
    return 0


def _bench(n: int) -> int:
    from ._bench import report
    report(n)
    return 0


def _source_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR",
                   help="also search DIR for #include \"...\"")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                   help="define a preprocessor macro")


def main(argv: list[str] | None = None, prog: str = "python -m metalkit") -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    p = argparse.ArgumentParser(prog=prog, description="metalkit command line")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info", help="device, backend, compiler and cache location")
    _source_options(sub.add_parser("check", help="compile a .metal file; print each kernel's signature or the errors"))
    b = sub.add_parser("build", help="compile every kernel of a .metal file into the kernel cache now, in parallel "
                                     "(otherwise a large file's kernels are compiled on first use)")
    _source_options(b)
    b.add_argument("-j", "--jobs", type=int, default=None, help="compilers at a time (default: one per core)")
    e = sub.add_parser("bench", help="dispatch overhead and bandwidth on this device")
    e.add_argument("-n", type=int, default=1 << 24, help="float32 elements of the add_arrays run (default: 2^24)")
    args = p.parse_args(argv)
    from .errors import MetalkitError
    try:
        if args.cmd == "info":
            status = _info()
        elif args.cmd == "check":
            status = _check(args.file, args.include_dirs, args.defines)
        elif args.cmd == "build":
            status = _build(args.file, args.include_dirs, args.defines, args.jobs)
        else:
            status = _bench(args.n)
        sys.stdout.flush()  # here, where a reader that went away is caught below
        return status
    except MetalkitError as e:  # a bad compiler or cache, an unknown device: one line, not a traceback
        print(f"{prog} {args.cmd}: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (`metalkit check big.metal | head -1`): what is left has no one to
        # read it. stdout now points at /dev/null, so Python's flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def script() -> int:
    """The ``metalkit`` command installed with the package: ``main`` under that name."""
    return main(prog="metalkit")


if __name__ == "__main__":
    sys.exit(main())
