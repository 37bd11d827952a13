"""Bad index and offset values found on the GPU, raised without a host sync per call.

The GPU kernels never read or write outside their tensors: a bag holding an out-of-range index
comes out NaN and bad offsets are clamped. They also record the first bad value they meet, per
device, in pinned host memory (csrc/dispatch/device_errors.h). It is raised as a Python exception
(IndexError for an index, ValueError for offsets, naming the op, the position and the value):

* at the start of the next mymetaops call on that device, if the kernel has finished by then;
* by `check_errors()`, which waits for the device's work first;
* at once, by the call itself, with `validate=True` (strict mode: one stream sync per call).
"""
from __future__ import annotations

import torch

from mymetaops.ops import dispatch


def check_errors(device=None) -> None:
    """Wait for the GPU work queued so far and raise the first bad index or offset value a
    mymetaops kernel met since the last report (default: every visible GPU)."""
    if device is not None:
        devices = [torch.device(device)]
    elif torch.cuda.is_available():
        devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    else:
        devices = []
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)
            dispatch.raise_recorded_error(d)


def strict_check(device: torch.device) -> None:
    """validate=True: wait for the call's stream, then raise what its kernels recorded."""
    torch.cuda.current_stream(device).synchronize()
    dispatch.raise_recorded_error(device)
