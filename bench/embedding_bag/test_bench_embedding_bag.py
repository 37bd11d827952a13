"""pytest-benchmark: mymetaops.embedding_bag vs torch.nn.functional.embedding_bag (GPU only).

Run: pytest bench -m gpu --benchmark-columns=median,iqr --benchmark-group-by=param:shape
"""
import pytest
import torch
import torch.nn.functional as F
from shapes import BACKWARD_SHAPE, SHAPES, make_inputs

import mymetaops

pytestmark = pytest.mark.gpu
IMPLEMENTATIONS = {
    "mymetaops": lambda idx, w, off: mymetaops.embedding_bag(idx, w, off, mode="sum", validate=False),
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
