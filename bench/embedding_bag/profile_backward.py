"""Per-kernel GPU time of one embedding_bag forward+backward step (the shape of the fwd+bwd target).

Where the backward's time goes (zero-fill, sort, plan, kernel), to decide what to speed up next.
Run on a GPU: python bench/embedding_bag/profile_backward.py
"""
import torch
from torch.profiler import ProfilerActivity, profile

import harness  # noqa: F401  (first: puts this checkout on sys.path)
import mymetaops
from shapes import BACKWARD_SHAPE, make_inputs


def main():
    weight, indices, offsets = make_inputs(BACKWARD_SHAPE)
    weight.requires_grad_()
    grad = torch.randn(BACKWARD_SHAPE.bags, BACKWARD_SHAPE.dim, device="cuda")

    def step():
        weight.grad = None
        mymetaops.embedding_bag(indices, weight, offsets, mode="sum").backward(grad)

    for _ in range(3):  # compile the Triton kernels, warm the allocator
        step()
    torch.cuda.synchronize()
    steps = 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    print(f"{BACKWARD_SHAPE}: GPU time per step, by kernel (sum over {steps} steps / {steps})")
    events = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)
    total = sum(e.device_time_total for e in events)
    for e in events[:15]:
        print(f"{e.device_time_total / steps / 1000:8.3f} ms {100 * e.device_time_total / total:5.1f}%  "
              f"x{e.count // steps:<3} {e.key[:90]}")
    print(f"{total / steps / 1000:8.3f} ms total")


if __name__ == "__main__":
    main()
