"""Which backend runs GPU calls: `MYMETAOPS_BACKEND` or the `use_backend` context manager.

"auto" (the default) lets mymetaops.model choose; "native", "triton" and "vendor" force that
backend's best candidate. The context manager wins over the environment variable. It is scoped to
the calling thread, and to the backward of the calls made inside it (the autograd context records
it), so it never leaks into other code; the environment variable is read on every call.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

BACKENDS = ("auto", "native", "triton", "vendor")
ENV_VAR = "MYMETAOPS_BACKEND"
_CODES = {"auto": -1, "native": 0, "triton": 1, "vendor": 2}
_local = threading.local()


def _checked(name: str, source: str) -> str:
    name = name.strip().lower()
    if name not in BACKENDS:
        raise ValueError(f"{source}: unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return name


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force a backend for the GPU calls made inside the block, e.g. `with use_backend("triton"):`."""
    import torch  # noqa: F401  (loads libtorch, which _C links against)

    from mymetaops import _C  # the C++ dispatch reads the setting on every call

    name = _checked(name, "mymetaops.use_backend")
    previous_name = getattr(_local, "forced", None)
    previous_code = _C._set_thread_forced_backend(_CODES[name])
    _local.forced = name
    try:
        yield
    finally:
        _C._set_thread_forced_backend(previous_code)
        _local.forced = previous_name


def current_backend() -> str:
    forced = getattr(_local, "forced", None)
    if forced is not None:
        return forced
    return _checked(os.environ.get(ENV_VAR, "auto"), ENV_VAR)
