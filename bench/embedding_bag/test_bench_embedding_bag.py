"""pytest-benchmark: mymetaops.embedding_bag as users call it (the default wrapper), the raw op, and
torch.nn.functional.embedding_bag (GPU only): the four shapes, forward+backward, the 26-table step.

Run: python -m pytest bench -m gpu --benchmark-columns=median,iqr --benchmark-group-by=param:shape
"""
import pytest
import torch
import torch.nn.functional as F

from harness import criteo_tables
from shapes import BACKWARD_SHAPE, SHAPES, make_inputs
from step import BAGS, DIM, IMPLEMENTATIONS as STEP_IMPLEMENTATIONS, make_step_inputs, training_step

import mymetaops

pytestmark = pytest.mark.gpu
IMPLEMENTATIONS = {
    "mymetaops": lambda idx, w, off: mymetaops.embedding_bag(idx, w, off, mode="sum"),
    "mymetaops-op": lambda idx, w, off: torch.ops.mymetaops.embedding_bag(w, idx, off, 0, None, -1, False),
    "torch": lambda idx, w, off: F.embedding_bag(idx, w, off, mode="sum"),
}


def cuda_timed(benchmark, fn):
    def run():
        fn()
        torch.cuda.synchronize()
    benchmark.pedantic(run, warmup_rounds=3, rounds=20)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward(benchmark, shape, impl):
    weight, indices, offsets = make_inputs(shape)
    cuda_timed(benchmark, lambda: IMPLEMENTATIONS[impl](indices, weight, offsets))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", [BACKWARD_SHAPE], ids=str)  # a shape parameter, to group by
def test_forward_backward(benchmark, shape, impl):
    weight, indices, offsets = make_inputs(shape)
    weight.requires_grad_()
    grad = torch.randn(shape.bags, shape.dim, device="cuda")

    def step():
        weight.grad = None
        IMPLEMENTATIONS[impl](indices, weight, offsets).backward(grad)
    cuda_timed(benchmark, step)


@pytest.mark.parametrize("impl", STEP_IMPLEMENTATIONS)
@pytest.mark.parametrize("shape", BAGS, ids=lambda bags: f"26 Criteo tables x {bags} bags")
def test_step_26_tables(benchmark, shape, impl):
    """One training step over the 26 tables (forward+backward, dense gradients), as step.py."""
    device = torch.device("cuda", torch.cuda.current_device())
    tables = [w.requires_grad_() for w in criteo_tables(device, DIM)]
    bags, grads = make_step_inputs(tables, shape, device)
    cuda_timed(benchmark, training_step(STEP_IMPLEMENTATIONS[impl], tables, bags, grads))
