"""bench/conftest.py skips every benchmark test where no GPU is; this folder's dry-run tests
(test_bench_jagged.py, not marked gpu) run on the CPU by design, so that skip is taken back for
them -- after every other conftest has modified the items (a hook wrapper's second half)."""
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
GPU_SKIP_REASON = "benchmarks need a GPU"  # bench/conftest.py's


@pytest.hookimpl(hookwrapper=True)
def pytest_collection_modifyitems(config, items):
    yield
    for item in items:
        if Path(item.path).resolve().parent != HERE or item.get_closest_marker("gpu") is not None:
            continue
        item.own_markers[:] = [m for m in item.own_markers
                               if not (m.name == "skip" and m.kwargs.get("reason") == GPU_SKIP_REASON)]
