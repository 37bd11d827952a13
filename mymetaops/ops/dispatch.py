"""The Python half of the per-call GPU dispatch (csrc/dispatch/dispatch.h), shared by every family.

The C++ kernel of an op computes its problem's bucket key on every call and keeps the decision
per bucket in a bounded cache. On a miss it calls `_on_miss`, which rebuilds the exact problem,
checks that the family's Python bucketing (mymetaops.model) gives the same key, and asks the
model for the bucket's representative problem -- the same decision `mymetaops.explain` prints.
A Triton choice is launched through `_run_triton` with the family's launcher.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import torch

from mymetaops import _C, model

BACKEND_CODES = {"native": 0, "triton": 1, "vendor": 2}
_BACKEND_NAMES = {code: name for name, code in BACKEND_CODES.items()}

_exact_problem: dict[str, Callable[[tuple[int, ...]], Any]] = {}
_triton_launcher: dict[str, Callable[..., torch.Tensor]] = {}
_native_for_vendor: dict[str, Callable[[str], bool]] = {}


def register(ops, exact_problem: Callable[[tuple[int, ...]], Any], triton_launcher: Callable[..., torch.Tensor],
             native_for_vendor: Callable[[str], bool] | None = None):
    """A family's ops: how to rebuild the exact problem from the fields its C++ kernel passes on a
    miss, how to run a Triton config (called as triton_launcher(op, config_ints, *args)), and
    whether the build's native kernels are the ones the model knows for a vendor (None: always)."""
    for op in ops:
        _exact_problem[op] = exact_problem
        _triton_launcher[op] = functools.partial(triton_launcher, op)
        if native_for_vendor is not None:
            _native_for_vendor[op] = native_for_vendor


@functools.lru_cache(maxsize=None)
def native_available(op: str | None = None, vendor: str | None = None) -> bool:
    """Whether this build of mymetaops._C has native GPU kernels (a CPU-only build has none) and,
    given an op and a vendor, kernels the model may offer for that op on that vendor's chips: the
    HIP-on-CUDA shim build carries hip/'s GEMM table, whose MFMA kernels an NVIDIA GPU cannot run."""
    built = any(name.startswith("mymetaops::")
                for name in torch._C._dispatch_get_registrations_for_dispatch_key("CUDA"))
    check = _native_for_vendor.get(op) if op is not None and vendor is not None else None
    return built and (check is None or check(vendor))


@functools.lru_cache(maxsize=64)
def hardware(device_index: int) -> model.HardwareSpec:
    return model.detect_hardware(torch.device("cuda", device_index))


def backend_name(code: int) -> str:
    return "auto" if code < 0 else _BACKEND_NAMES[code]


def decide_bucket(op: str, device_index: int, backend: str, problem) -> model.Decision:
    """The decision for `problem`'s bucket on a device: what the C++ dispatch runs."""
    family = model.family_of(op)
    representative = family.problem_from_key(op, family.bucket_key(op, problem))
    hw = hardware(device_index)
    return model.decide(op, representative, hw, backend, native_available(op, hw.vendor))


def config_ints(config) -> list[int]:
    """What the kernel gets: the config's as_list() where it names its ints, else every field."""
    if config is None:
        return []
    if hasattr(config, "as_list"):
        return [int(v) for v in config.as_list()]
    return [int(v) for v in dataclasses.astuple(config)]


def _on_miss(op: str, key: tuple[int, ...], exact: tuple[int, ...]) -> tuple[int, list[int]]:
    device_index, forced, fields = key[0], key[1], key[2:]
    family = model.family_of(op)
    problem = _exact_problem[op](exact)
    if family.bucket_key(op, problem) != fields:
        raise RuntimeError(f"mymetaops: internal error: the C++ bucket key {fields} of {op} differs "
                           f"from the model's {family.bucket_key(op, problem)} for {problem}")
    choice = decide_bucket(op, device_index, backend_name(forced), problem).choice
    return BACKEND_CODES[choice.backend], config_ints(choice.config)


def _run_triton(op: str, config: tuple[int, ...], args: tuple) -> torch.Tensor:
    return _triton_launcher[op](config, *args)


def cache_info() -> dict[str, int]:
    """Decision-cache statistics of this process: hits, misses, size and capacity."""
    return _C._cache_info()


def cache_clear() -> None:
    _C._cache_clear()


def raise_recorded_error(device: torch.device) -> None:
    """Raise the bad value a kernel recorded on `device` (no sync: what finished so far)."""
    _C._raise_recorded_error(device.index if device.index is not None else torch.cuda.current_device())


def error_record(device: torch.device) -> torch.Tensor:
    return _C._error_record(device.index if device.index is not None else torch.cuda.current_device())


_C._set_dispatch_handlers(_on_miss, _run_triton)
