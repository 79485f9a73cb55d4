"""The CPU OpenCL runtimes that the bench/ scripts run beside metalkit, through pyopencl:
PoCL, from the system's packages, and Intel's CPU runtime, from the intel-opencl-rt wheel.

A launcher runs one kernel over numpy arrays in place (buffers made with USE_HOST_PTR, as
metalkit uses numpy arrays in place on the CPU) and returns once its outputs are mapped back
to the host, so a timed call does what a synchronous metalkit call does.
"""
from __future__ import annotations

import importlib.metadata
import os
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np

SOURCE = Path(__file__).with_name("workloads.cl")
RUNTIMES = {  # column name -> (OpenCL platform name, how to get the runtime)
    "PoCL": ("Portable Computing Language",
             "get PoCL, the CPU OpenCL implementation, with `apt-get install -y pocl-opencl-icd "
             "ocl-icd-libopencl1` (Debian, Ubuntu)"),
    "Intel": ("Intel(R) OpenCL",
              "get Intel's CPU OpenCL runtime (the wheels intel-opencl-rt and intel-cmplr-lib-rt) "
              "with `pip install \".[bench]\"`"),
}
SYSTEM_VENDORS = "/etc/OpenCL/vendors"  # where the ocl-icd loader looks by default
_vendors: Optional[tempfile.TemporaryDirectory] = None  # kept while the process runs


def intel_library() -> Optional[Path]:
    """libintelocl.so of the installed intel-opencl-rt wheel. The wheel's own .icd file names a
    build path, not this one, so the library is found through the wheel's file list."""
    try:
        files = importlib.metadata.files("intel-opencl-rt") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((f.locate().resolve() for f in files if f.name == "libintelocl.so"), None)


def register_intel() -> None:
    """Points the ocl-icd loader at a directory holding an .icd file for Intel's runtime and
    links to the .icd files it would otherwise read (OCL_ICD_VENDORS replaces the default
    directory). The library finds its own dependencies (its RUNPATH is $ORIGIN), so no
    LD_LIBRARY_PATH is needed. Must run before pyopencl first lists the platforms."""
    global _vendors
    lib = intel_library()
    if lib is None or _vendors is not None:
        return
    current = Path(os.environ.get("OCL_ICD_VENDORS") or SYSTEM_VENDORS)
    icds = [current] if current.is_file() else sorted(current.glob("*.icd"))
    if any(icd.read_text().strip().endswith("libintelocl.so") for icd in icds):
        return  # the system registers Intel's runtime already
    _vendors = tempfile.TemporaryDirectory(prefix="metalkit-bench-icd-")
    for icd in icds:
        os.symlink(icd.resolve(), Path(_vendors.name, icd.name))
    Path(_vendors.name, "metalkit-bench-intel-cpu.icd").write_text(f"{lib}\n")
    os.environ["OCL_ICD_VENDORS"] = _vendors.name


class CpuOpenCL:
    """A CPU OpenCL device with workloads.cl built for it."""

    def __init__(self, cl, device) -> None:
        self._cl = cl
        self.device = device
        self.context = cl.Context(devices=[device])
        self.queue = cl.CommandQueue(self.context)
        # OpenCL C 3.0 has sub-groups only when asked for (workloads.cl tests __opencl_c_subgroups)
        std = ["-cl-std=CL3.0"] if device.opencl_c_version.startswith("OpenCL C 3") else []
        with warnings.catch_warnings():  # Intel's compiler logs its steps on every build
            warnings.simplefilter("ignore", cl.CompilerWarning)
            self.program = cl.Program(self.context, SOURCE.read_text()).build(options=std)

    @property
    def name(self) -> str:
        return f"{self.device.name.strip()} ({self.device.platform.version.strip()})"

    def has_kernel(self, name: str) -> bool:
        return name in self.program.kernel_names.split(";")

    @property
    def has_subgroups(self) -> bool:
        """Whether OpenCL C has sub-groups (SIMD-groups) on this device."""
        features = [f.name for f in getattr(self.device, "opencl_c_features", [])]
        return ("cl_khr_subgroups" in self.device.extensions.split()
                or "__opencl_c_subgroups" in features)

    def launcher(self, kernel: str, global_size: Sequence[int],
                 local_size: Optional[Sequence[int]], args: Sequence[Union[np.ndarray, np.generic]],
                 outputs: Sequence[np.ndarray]) -> Callable[[], None]:
        """A function that runs `kernel` on args (arrays, numpy scalars) and waits for outputs."""
        return _Launch(self, kernel, global_size, local_size, args, outputs)


class _Launch:
    def __init__(self, dev: CpuOpenCL, kernel: str, global_size: Sequence[int],
                 local_size: Optional[Sequence[int]], args: Sequence[Union[np.ndarray, np.generic]],
                 outputs: Sequence[np.ndarray]) -> None:
        cl = self._cl = dev._cl
        self.queue = dev.queue
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
        # Held here for as long as the kernel may run: set_args keeps no reference to them.
        self.buffers = {id(a): cl.Buffer(dev.context, flags, hostbuf=a)
                        for a in args if isinstance(a, np.ndarray)}
        self.kernel = cl.Kernel(dev.program, kernel)
        self.kernel.set_args(*[self.buffers.get(id(a), a) for a in args])
        self.sizes = tuple(global_size), None if local_size is None else tuple(local_size)
        self.outputs = [(self.buffers[id(o)], o) for o in outputs]

    def __call__(self) -> None:
        cl = self._cl
        cl.enqueue_nd_range_kernel(self.queue, self.kernel, *self.sizes)
        for buf, host in self.outputs:  # the OpenCL way to make results visible to the host
            view, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ, 0, host.shape,
                                            host.dtype)
            view.base.release(self.queue)
        self.queue.finish()


def open_devices() -> dict[str, Union[CpuOpenCL, str]]:
    """Per runtime of RUNTIMES, its CPU device, or a sentence saying why there is none and how
    to get it."""
    register_intel()
    try:
        import pyopencl as cl
    except ImportError:
        return {name: "pyopencl is not installed: get it with `pip install \".[bench]\"`"
                for name in RUNTIMES}
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # pyopencl raises its own errors, or RuntimeError, when no ICD is found
        platforms, why = [], f"no OpenCL platform ({first_line(e)})"
    else:
        why = f"not among the OpenCL platforms ({', '.join(p.name for p in platforms) or 'none'})"
    devices: dict[str, Union[CpuOpenCL, str]] = {}
    for name, (platform, how_to_get) in RUNTIMES.items():
        cpus = [d for p in platforms if p.name == platform
                for d in p.get_devices() if d.type & cl.device_type.CPU]
        if not cpus:
            devices[name] = f"{why}: {how_to_get}"
            continue
        try:
            devices[name] = CpuOpenCL(cl, cpus[0])
        except cl.Error as e:
            devices[name] = f"{cpus[0].name.strip()} cannot build {SOURCE.name}: {first_line(e)}"
    return devices


def first_line(e: Exception) -> str:
    """The line of an OpenCL error that says what went wrong (build logs are long)."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return next((ln for ln in lines if "error:" in ln), lines[0] if lines else type(e).__name__)
