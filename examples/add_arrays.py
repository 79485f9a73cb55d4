"""Add two arrays on the GPU (or the CPU simulator) with the bundled add_arrays kernel."""
import numpy as np

import metalkit as mk

a = np.full(1_000_000, 1.0, np.float32)
b = np.full_like(a, 2.0)
out = np.empty_like(a)
mk.run("add_arrays", a, b, out)
assert out[0] == 3.0 and out[-1] == 3.0 and np.all(out == 3.0)
print(f"{mk.device().name} [{mk.device().backend}]: add_arrays over {a.size} floats -> "
      f"out[0] = {out[0]}, out[-1] = {out[-1]}")
