"""mymetaops.nn.EmbeddingBag against torch.nn.EmbeddingBag: same module, mymetaops' lookup."""
from __future__ import annotations

import copy
import inspect
import itertools
import os
import re
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import mymetaops
import mymetaops.nn
from mymetaops.nn import EmbeddingBag

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
TABLE_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# Relative to the sum of |terms| of each element: both sides' output rounding plus summation order.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
NUM, DIM = 30, 20

# (constructor kwargs, input form, per_sample_weights): per_sample_weights only exist in mode "sum".
CONFIGS = [
    (dict(mode=mode, padding_idx=padding_idx, include_last_offset=last), form, weighted)
    for mode, padding_idx, last, form, weighted in itertools.product(
        ["sum", "mean"], [None, 3, -2], [False, True], ["1d-int64", "1d-int32", "2d"],
        [False, True])
    if not (weighted and mode == "mean")
]


def config_id(config):
    kwargs, form, weighted = config
    names = [f"{k}={v}" for k, v in kwargs.items()] + [form] + (["psw"] if weighted else [])
    return "-".join(names)


def make_pair(device, dtype, **kwargs):
    """(torch's module, ours holding torch's state_dict), built with the same arguments."""
    ref = torch.nn.EmbeddingBag(NUM, DIM, device=device, dtype=dtype, **kwargs)
    ours = EmbeddingBag(NUM, DIM, device=device, dtype=dtype, **kwargs)
    ours.load_state_dict(ref.state_dict())  # strict
    return ref, ours


def make_inputs(module, form, weighted, seed):
    """Fresh (input, offsets, per_sample_weights) for module: an empty bag, repeated rows and the
    padding row included."""
    g = torch.Generator().manual_seed(seed)
    if form == "2d":
        input, offsets = torch.randint(NUM, (5, 3), generator=g), None
    else:
        sizes = torch.randint(0, 7, (6,), generator=g)
        sizes[0], sizes[2] = 3, 0
        input = torch.randint(NUM, (int(sizes.sum()),), generator=g)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
        offsets = offsets if module.include_last_offset else offsets[:-1]
    flat = input.view(-1)
    flat[1::5] = flat[0]
    if module.padding_idx is not None:
        flat[::4] = module.padding_idx
    if form == "1d-int32":
        input, offsets = input.int(), offsets.int()
    weight = module.weight
    psw = torch.randn(input.shape, generator=g).to(weight.dtype) if weighted else None
    move = lambda t: None if t is None else t.to(weight.device)  # noqa: E731
    return move(input), move(offsets), move(psw)


def to_cpu(tensor):
    return None if tensor is None else tensor.cpu()


def run(module, input, offsets, psw, grad_seed):
    """(out, grad of weight, grad of per_sample_weights, upstream gradient)."""
    module.zero_grad()
    psw = None if psw is None else psw.detach().requires_grad_()
    out = module(input, offsets, psw)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(out)
    out.backward(grad)
    return out, module.weight.grad, None if psw is None else psw.grad, grad


def run_reference(ref, input, offsets, psw, grad_seed):
    """run() of torch's module; on the CPU where torch's CUDA kernels lack the dtype (torch 2.11 has
    no bf16 per_sample_weights backward on CUDA)."""
    try:
        return run(ref, input, offsets, psw, grad_seed)
    except NotImplementedError:
        if not ref.weight.is_cuda:
            raise
    return run(copy.deepcopy(ref).cpu(), to_cpu(input), to_cpu(offsets), to_cpu(psw), grad_seed)


def scales(module, input, offsets, psw, grad):
    """Sum of |terms| of each element of (out, grad of weight, grad of per_sample_weights): torch's
    module in float64 on |weight|, |per_sample_weights| and |upstream gradient|."""
    absolute = torch.nn.EmbeddingBag(NUM, DIM, mode=module.mode,
                                     include_last_offset=module.include_last_offset,
                                     padding_idx=module.padding_idx,
                                     _weight=module.weight.detach().abs().double().cpu())
    psw = None if psw is None else psw.detach().abs().double().cpu().requires_grad_()
    out = absolute(to_cpu(input), to_cpu(offsets), psw)
    out.backward(grad.abs().double().cpu())
    return out, absolute.weight.grad, None if psw is None else psw.grad


def assert_matches(actual, expected, scale, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    err = (actual.double().cpu() - expected.double().cpu()).abs().flatten()
    bound = TOLERANCE[actual.dtype] * scale.flatten()
    bad = ~(err <= bound)  # NaN fails too
    worst = err.argmax()
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} elements off, worst error "
                           f"{err[worst]:.3g} where the bound is {bound[worst]:.3g}")


def compare(ref, ours, input, offsets, psw, seed):
    out, gw, gpsw, grad = run(ours, input, offsets, psw, seed)
    ref_out, ref_gw, ref_gpsw, _ = run_reference(ref, input, offsets, psw, seed)
    out_scale, gw_scale, gpsw_scale = scales(ref, input, offsets, psw, grad)
    assert_matches(out, ref_out, out_scale, "forward")
    assert_matches(gw, ref_gw, gw_scale, "grad of weight")
    if psw is not None:
        assert_matches(gpsw, ref_gpsw, gpsw_scale, "grad of per_sample_weights")


# ---- forward and backward against torch's module -----------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", TABLE_DTYPES, ids=str)
@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_matches_torch_module(device, dtype, config):
    kwargs, form, weighted = config
    torch.manual_seed(0)
    ref, ours = make_pair(device, dtype, **kwargs)
    for seed in range(2):  # a second call: fresh inputs, gradients reset
        compare(ref, ours, *make_inputs(ours, form, weighted, seed), seed)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kwargs", [dict(mode="sum"), dict(mode="mean", padding_idx=-1),
                                    dict(mode="sum", include_last_offset=True, padding_idx=4)],
                         ids=str)
def test_our_state_dict_loads_into_torch(device, kwargs):
    ours = EmbeddingBag(NUM, DIM, device=device, **kwargs)
    ref = torch.nn.EmbeddingBag(NUM, DIM, device=device, **kwargs)
    assert list(ours.state_dict()) == list(ref.state_dict()) == ["weight"]
    ref.load_state_dict(ours.state_dict())  # strict
    compare(ref, ours, *make_inputs(ours, "1d-int64", False, 0), 0)


class RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func._schema.name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", DEVICES)
def test_lookup_is_mymetaops(device):
    """Everything above would pass with torch's own forward: check which op runs."""
    module = EmbeddingBag(NUM, DIM, mode="sum", device=device)
    input, offsets, psw = make_inputs(module, "1d-int64", True, 0)
    with RecordOps() as ops:
        module(input, offsets, psw.requires_grad_()).sum().backward()
    assert "mymetaops::embedding_bag" in ops.names
    assert not any(name.startswith("aten::") and "embedding_bag" in name for name in ops.names)


# ---- the rest of the module is torch's ---------------------------------------------------------

def test_constructor_signature_is_torchs():
    def parameters(cls):
        return [(p.name, p.kind, p.default)
                for p in inspect.signature(cls.__init__).parameters.values()]
    assert parameters(EmbeddingBag) == parameters(torch.nn.EmbeddingBag)


@pytest.mark.parametrize("kwargs", [dict(), dict(padding_idx=3), dict(padding_idx=-1),
                                    dict(mode="sum", padding_idx=0, dtype=torch.float16)], ids=str)
def test_reset_parameters_is_torchs(kwargs):
    torch.manual_seed(7)
    ref = torch.nn.EmbeddingBag(NUM, DIM, **kwargs)
    torch.manual_seed(7)
    ours = EmbeddingBag(NUM, DIM, **kwargs)
    assert ours.padding_idx == ref.padding_idx
    torch.testing.assert_close(ours.weight, ref.weight, rtol=0, atol=0)
    with torch.no_grad():
        ours.weight.fill_(5.0)
    torch.manual_seed(8)
    ours.reset_parameters()
    torch.manual_seed(8)
    ref.reset_parameters()
    torch.testing.assert_close(ours.weight, ref.weight, rtol=0, atol=0)
    if ours.padding_idx is not None:
        assert not ours.weight[ours.padding_idx].any()


# _freeze is nn.Embedding's argument, not nn.EmbeddingBag's: both refuse it the same way.
@pytest.mark.parametrize("kwargs", [dict(padding_idx=NUM), dict(padding_idx=-NUM - 1),
                                    dict(_weight=torch.zeros(NUM, DIM + 1)),
                                    dict(_weight=torch.zeros(NUM + 1, DIM)), dict(_freeze=True)],
                         ids=lambda kw: next(iter(kw)))
def test_constructor_errors_are_torchs(kwargs):
    with pytest.raises(Exception) as expected:
        torch.nn.EmbeddingBag(NUM, DIM, **kwargs)
    with pytest.raises(expected.type, match=f"^{re.escape(str(expected.value))}$"):
        EmbeddingBag(NUM, DIM, **kwargs)


def test_from_pretrained_rejects_what_torch_rejects():
    with pytest.raises(Exception) as expected:
        torch.nn.EmbeddingBag.from_pretrained(torch.zeros(NUM))
    with pytest.raises(expected.type, match=f"^{re.escape(str(expected.value))}$"):
        EmbeddingBag.from_pretrained(torch.zeros(NUM))


UNSUPPORTED = [dict(max_norm=1.0), dict(scale_grad_by_freq=True), dict(sparse=True),
               dict(mode="max")]


@pytest.mark.parametrize("kwargs", UNSUPPORTED, ids=str)
def test_unsupported_options_raise_at_construction(kwargs):
    message = "mymetaops does not support .*; use torch.nn.EmbeddingBag"
    with pytest.raises(NotImplementedError, match=message):
        EmbeddingBag(NUM, DIM, **kwargs)
    with pytest.raises(NotImplementedError, match=message):
        EmbeddingBag.from_pretrained(torch.randn(NUM, DIM), **kwargs)
    torch.nn.EmbeddingBag(NUM, DIM, **kwargs)  # which torch accepts
    # Set after construction: the functional wrapper refuses it at the call.
    module = EmbeddingBag(NUM, DIM)
    for name, value in kwargs.items():
        setattr(module, name, value)
    with pytest.raises(NotImplementedError):
        module(*make_inputs(module, "1d-int64", False, 0)[:2])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("freeze", [True, False])
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_from_pretrained(device, freeze, padding_idx):
    table = torch.randn(NUM, DIM, device=device)
    ref = torch.nn.EmbeddingBag.from_pretrained(table.clone(), freeze=freeze, mode="sum",
                                                padding_idx=padding_idx)
    ours = EmbeddingBag.from_pretrained(table, freeze=freeze, mode="sum", padding_idx=padding_idx)
    assert type(ours) is EmbeddingBag
    assert ours.weight.requires_grad is (not freeze)
    assert ours.padding_idx == ref.padding_idx and ours.mode == "sum"
    assert ours.weight.data_ptr() == table.data_ptr()  # torch's wraps the given tensor, no copy
    input, offsets, _ = make_inputs(ours, "1d-int64", False, 0)
    out = ours(input, offsets)
    torch.testing.assert_close(out, ref(input, offsets), rtol=1e-5, atol=1e-5)
    assert out.requires_grad is (not freeze)
    if not freeze:
        compare(ref, ours, input, offsets, None, 0)
        if ours.padding_idx is not None:
            assert not ours.weight.grad[ours.padding_idx].any()


@pytest.mark.parametrize("kwargs", [dict(), dict(mode="sum", padding_idx=-1),
                                    dict(norm_type=1.0, include_last_offset=True)], ids=str)
def test_isinstance_and_repr(kwargs):
    ours = EmbeddingBag(NUM, DIM, **kwargs)
    assert isinstance(ours, torch.nn.EmbeddingBag)
    assert repr(ours) == repr(torch.nn.EmbeddingBag(NUM, DIM, **kwargs))


@pytest.mark.parametrize("device", DEVICES)
def test_deepcopy_and_to(device):
    ours = EmbeddingBag(NUM, DIM, mode="sum", padding_idx=1)
    clone = copy.deepcopy(ours)
    assert type(clone) is EmbeddingBag and clone.weight.data_ptr() != ours.weight.data_ptr()
    torch.testing.assert_close(clone.weight, ours.weight, rtol=0, atol=0)
    moved = ours.to(device=device, dtype=torch.bfloat16)
    assert moved is ours and ours.weight.dtype == torch.bfloat16
    assert ours.weight.device.type == device
    ref = torch.nn.EmbeddingBag(NUM, DIM, mode="sum", padding_idx=1, device=device,
                                dtype=torch.bfloat16)
    ref.load_state_dict(ours.state_dict())
    compare(ref, ours, *make_inputs(ours, "1d-int64", False, 0), 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_sgd_step_matches_torch(device, mode):
    torch.manual_seed(0)
    ref, ours = make_pair(device, torch.float32, mode=mode, padding_idx=0)
    input, offsets, _ = make_inputs(ours, "1d-int64", False, 0)
    target = torch.randn(offsets.numel(), DIM, device=device)
    for module in (ref, ours):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.5, momentum=0.9)
        for _ in range(2):
            optimizer.zero_grad()
            (module(input, offsets) - target).square().sum().backward()
            optimizer.step()
    torch.testing.assert_close(ours.weight, ref.weight)
    assert not ours.weight[0].any()  # the padding row gets no gradient


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device):
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bag = EmbeddingBag(NUM, DIM, mode="sum", padding_idx=0, device=device)
            self.head = torch.nn.Linear(DIM, 1, device=device)

        def forward(self, input, offsets, per_sample_weights):
            return self.head(self.bag(input, offsets, per_sample_weights).relu()).square().sum()

    torch.manual_seed(0)
    eager = Model()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, fullgraph=True)
    input, offsets, psw = make_inputs(eager.bag, "1d-int64", True, 0)
    psw_eager, psw_compiled = psw.clone().requires_grad_(), psw.clone().requires_grad_()
    eager(input, offsets, psw_eager).backward()
    loss = compiled(input, offsets, psw_compiled)
    loss.backward()
    torch.testing.assert_close(loss, eager(input, offsets, psw))
    torch.testing.assert_close(model.bag.weight.grad, eager.bag.weight.grad)
    torch.testing.assert_close(psw_compiled.grad, psw_eager.grad)


def test_reachable_from_the_package():
    """`import mymetaops` alone makes mymetaops.nn reachable (the package's lazy attributes)."""
    code = "import mymetaops; assert mymetaops.nn.EmbeddingBag.__module__ == 'mymetaops.nn'"
    root = os.path.dirname(os.path.dirname(os.path.abspath(mymetaops.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr
    assert mymetaops.nn.EmbeddingBag is EmbeddingBag
