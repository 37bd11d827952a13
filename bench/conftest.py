import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


def pytest_collection_modifyitems(config, items):
    if not torch.cuda.is_available():
        for item in items:
            item.add_marker(pytest.mark.skip(reason="benchmarks need a GPU"))
