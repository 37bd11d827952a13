import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        for item in items:
            item.add_marker(pytest.mark.skip(reason="benchmarks need a GPU"))
