"""Shared test set-up: GPU marker, the Triton interpreter on CPU-only machines, hypothesis profiles."""
import os

import torch

# Must happen before anything imports triton: with no GPU, Triton kernels run in its interpreter.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("quick", max_examples=15, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

HAS_GPU = torch.cuda.is_available()
TRITON_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def _version(module):
    return tuple(int(part) for part in module.__version__.split(".")[:2])


def _interpreter_broken():
    """Triton < 3.7's interpreter calls int() on 1-element arrays, which numpy >= 2.3 refuses."""
    import numpy
    import triton
    return TRITON_INTERPRETED and _version(triton) < (3, 7) and _version(numpy) >= (2, 3)


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a GPU (run `pytest -m gpu` on a GPU machine)")
    skip_interpreter = pytest.mark.skip(
        reason="this Triton's interpreter fails with numpy >= 2.3: use triton >= 3.7 or numpy < 2.3")
    interpreter_broken = _interpreter_broken()
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip_gpu)
        elif interpreter_broken and ("triton-interpreter" in item.nodeid
                                     or item.path.name.startswith("test_triton_")):
            item.add_marker(skip_interpreter)
