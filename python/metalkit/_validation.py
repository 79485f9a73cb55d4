"""``METALKIT_VALIDATE=1``: Apple's Metal API validation and shader validation.

Metal reads ``MTL_DEBUG_LAYER`` and ``MTL_SHADER_VALIDATION`` from the
environment when a device is created, and ignores later changes. metalkit
creates its device on first use, in its compiled core; ``import metalkit``
calls :func:`apply` before anything loads that core, so setting
``METALKIT_VALIDATE=1`` before importing metalkit is always early enough
(unless another library in the process already created a Metal device).
Validation makes kernels slower; Metal then catches GPU faults such as
out-of-bounds accesses, and metalkit raises them as KernelFault with Metal's
description. The CPU simulator is unaffected by this setting.
"""
from __future__ import annotations

import os
from typing import MutableMapping

from .errors import DeviceError

_ON = ("1", "true", "yes", "on")
_OFF = ("", "0", "false", "no", "off")


def apply(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Turns Metal's validation layers on if METALKIT_VALIDATE asks; returns whether it does."""
    value = environ.get("METALKIT_VALIDATE", "").strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        raise DeviceError(f"METALKIT_VALIDATE={environ['METALKIT_VALIDATE']!r}: use 1 to turn Metal's validation on, "
                         "0 (or unset) to leave it off")
    # setdefault: a value the user gave Metal directly (e.g. MTL_SHADER_VALIDATION=0) stands.
    environ.setdefault("MTL_DEBUG_LAYER", "1")
    environ.setdefault("MTL_SHADER_VALIDATION", "1")
    return True
