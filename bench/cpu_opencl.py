"""The CPU OpenCL device (PoCL) that the bench/ scripts run beside metalkit, through pyopencl.

A launcher runs one kernel over numpy arrays in place (buffers made with USE_HOST_PTR, as
metalkit uses numpy arrays in place on the CPU) and returns once its outputs are mapped back
to the host, so a timed call does what a synchronous metalkit call does.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import numpy as np

SOURCE = Path(__file__).with_name("workloads.cl")
HOW_TO_GET = ("get PoCL, the CPU OpenCL implementation, with "
              "`apt-get install -y pocl-opencl-icd ocl-icd-libopencl1` (Debian, Ubuntu) "
              "and pyopencl with `pip install \".[bench]\"`")


class CpuOpenCL:
    """A CPU OpenCL device with workloads.cl built for it."""

    def __init__(self, cl, device) -> None:
        self._cl = cl
        self.device = device
        self.context = cl.Context(devices=[device])
        self.queue = cl.CommandQueue(self.context)
        self.program = cl.Program(self.context, SOURCE.read_text()).build()

    @property
    def name(self) -> str:
        return f"{self.device.name.strip()} ({self.device.platform.version.strip()})"

    def has_kernel(self, name: str) -> bool:
        return name in self.program.kernel_names.split(";")

    def has_extension(self, name: str) -> bool:
        return name in self.device.extensions.split()

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


def open_device() -> Union[CpuOpenCL, str]:
    """The first CPU OpenCL device, or a sentence saying why there is none and how to get one."""
    try:
        import pyopencl as cl
    except ImportError:
        return f"pyopencl is not installed: {HOW_TO_GET}"
    try:
        platforms = cl.get_platforms()
    except Exception as e:  # pyopencl raises its own errors, or RuntimeError, when no ICD is found
        return f"no OpenCL platform ({first_line(e)}): {HOW_TO_GET}"
    cpus = [d for p in platforms for d in p.get_devices() if d.type & cl.device_type.CPU]
    if not cpus:
        names = ", ".join(p.name for p in platforms)
        return f"no OpenCL CPU device (platforms: {names}): {HOW_TO_GET}"
    try:
        return CpuOpenCL(cl, cpus[0])
    except cl.Error as e:
        return f"{cpus[0].name.strip()} cannot build {SOURCE.name}: {first_line(e)}"


def first_line(e: Exception) -> str:
    """The line of an OpenCL error that says what went wrong (build logs are long)."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return next((ln for ln in lines if "error:" in ln), lines[0] if lines else type(e).__name__)
