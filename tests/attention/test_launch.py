"""mymetaops.triton.launch: the compiled-kernel cache behind the attention launchers. Its key must
tell apart every argument Triton specializes differently (else a kernel compiled for aligned
pointers or a divisible stride would run on others: a wrong answer), and a launch through the
cache must compute what kernel[grid] computes."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mymetaops.triton import launch

HAS_GPU = torch.cuda.is_available()


def _key(args):
    return launch._key_function(args)(*args)


def test_key_separates_what_triton_specializes():
    x = torch.zeros(64)
    base = (x, 7, 32, 0.5, None, True)
    same = (torch.ones(64), 7, 48, 1.5, None, False)  # another aligned fp32 tensor, 48 % 16 == 0
    assert _key(base) == launch._key_function(base)(*same)
    key = launch._key_function(base)
    for other in [(x[1:], 7, 32, 0.5, None, True),            # misaligned pointer
                  (x.double(), 7, 32, 0.5, None, True),       # dtype
                  (x, 1, 32, 0.5, None, True),                # the value 1
                  (x, 7, 33, 0.5, None, True),                # divisibility by 16
                  (x, 7, 2**31 + 32, 0.5, None, True)]:       # 64-bit
        assert key(*other) != key(*base), other
    assert key(x, 17, 32, 0.5, None, True) != key(x, 1, 32, 0.5, None, True)


@pytest.mark.parametrize("other", [(torch.zeros(4), torch.zeros(4), 0.5, None, True),  # a tensor where an int was
                                   (torch.zeros(4), 3, 1, None, True),      # an int where a float was
                                   (torch.zeros(4), 3, 0.5, torch.zeros(4), True),  # a tensor for None
                                   (None, 3, 0.5, None, True),             # None for a tensor
                                   (torch.zeros(4), True, 0.5, None, True)])  # a bool where an int was
def test_key_refuses_other_kinds(other):
    key = launch._key_function((torch.zeros(4), 3, 0.5, None, True))
    with pytest.raises((TypeError, AttributeError)):
        key(*other)


@triton.jit
def _axpb(x_ptr, y_ptr, n, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * a + b, mask=offs < n)


@pytest.mark.gpu
def test_launcher_matches_the_jit_launch():
    """Aligned and misaligned views, n = 1 and odd n, fp32 and fp16: each through the cache twice
    (the second launch takes the direct path), against torch."""
    run = launch.Launcher(_axpb, dict(BLOCK=128, num_warps=4))
    device = torch.device("cuda", torch.cuda.current_device())
    storage = torch.randn(1001, device=device)
    for dtype in (torch.float32, torch.float16):
        for offset, n in ((0, 1000), (1, 999), (0, 1), (3, 17)):
            x = storage.to(dtype)[offset:offset + n]
            for _ in range(2):
                y = torch.full_like(x, float("nan"))
                run((triton.cdiv(n, 128),), device, x, y, n, 2.0, 0.25)
                torch.testing.assert_close(y, x * 2.0 + 0.25)
    assert len(run._compiled) >= 4  # aligned / misaligned / n == 1 / fp16 got kernels of their own


@pytest.mark.gpu
def test_launch_hooks_take_the_jit_path():
    """A profiler's launch hook sees every launch: with one set, the cache is bypassed."""
    from triton import knobs
    run = launch.Launcher(_axpb, dict(BLOCK=128, num_warps=4))
    device = torch.device("cuda", torch.cuda.current_device())
    x = torch.randn(100, device=device)
    seen = []
    hook = knobs.runtime.launch_enter_hook
    if not hasattr(hook, "add"):
        pytest.skip("this Triton has no launch hook chain")
    hook.add(seen.append)
    try:
        for _ in range(3):
            run((1,), device, x, torch.empty_like(x), 100, 1.0, 0.0)
    finally:
        hook.remove(seen.append)
    assert len(seen) == 3 and not run._compiled
