"""Which backend runs GPU calls: `MYMETAOPS_BACKEND` or the `use_backend` context manager.

"auto" (the default) lets mymetaops.model choose; "native", "triton" and "vendor" force that
backend's best candidate. The context manager wins over the environment variable; it is scoped to
the current thread / asyncio task (a ContextVar), so it never leaks into other code.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

BACKENDS = ("auto", "native", "triton", "vendor")
ENV_VAR = "MYMETAOPS_BACKEND"

_forced: ContextVar[str | None] = ContextVar("mymetaops_backend", default=None)


def _checked(name: str, source: str) -> str:
    name = name.strip().lower()
    if name not in BACKENDS:
        raise ValueError(f"{source}: unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    return name


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Force a backend for the GPU calls made inside the block, e.g. `with use_backend("triton"):`."""
    token = _forced.set(_checked(name, "mymetaops.use_backend"))
    try:
        yield
    finally:
        _forced.reset(token)


def current_backend() -> str:
    forced = _forced.get()
    if forced is not None:
        return forced
    return _checked(os.environ.get(ENV_VAR, "auto"), ENV_VAR)
