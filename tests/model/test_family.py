"""A family registered at runtime, with no edit to shared code: chosen, forced, explained (the
`explain` function and the CLI), bucketed, and in the regret report."""
import argparse
from dataclasses import dataclass

import pytest

from mymetaops.model import Estimate, Family, decide, family_of, get_hardware, register, unregister
from mymetaops.model.__main__ import main

H200 = get_hardware("H200")


@dataclass(frozen=True)
class ToyProblem:
    n: int


@dataclass(frozen=True)
class ToyConfig:
    width: int

    def as_list(self):
        return [self.width]

    def __str__(self):
        return f"width{self.width}"


class ToyFamily(Family):
    """Scales n elements. Its Triton kernel is twice as fast per call, but compiles on first use."""

    name = "toy"
    ops = ("toy_scale", "toy_scale_backward")
    problem_type = ToyProblem

    def candidates(self, op, p, hw):
        yield "native", ToyConfig(1), Estimate(10 + p.n / 100, "memory", "toy native", 1.0, 32, 1)
        yield "triton", ToyConfig(2), Estimate(5 + p.n / (150 if p.n < 10**7 else 1000), "memory", "toy triton",
                                               1.0, 32, 1)

    def describe(self, p):
        return f"{p.n} toy elements"

    def add_arguments(self, parser: argparse.ArgumentParser):
        parser.add_argument("--n", type=int, required=True)

    def problem_from_args(self, op, args):
        return ToyProblem(args.n)

    def problem_from_call(self, op, x, scale=1.0):
        return ToyProblem(x.numel())

    def backward_ops(self, op, p):
        return [("toy_scale_backward", p)] if op == "toy_scale" else []

    def missing_backend_note(self, op, backend):
        return "no vendor library scales toys"

    def bucket_key(self, op, p):
        return (p.n.bit_length(),)  # octaves

    def problem_from_key(self, op, key):
        return ToyProblem(1 << (key[0] - 1) if key[0] else 0)

    def sample(self, op, rng):
        return ToyProblem(rng.randrange(1, 1 << 20))


@pytest.fixture
def toy():
    family = register(ToyFamily())
    yield family
    unregister(family.name)


def test_registered_at_runtime(toy):
    assert family_of("toy_scale") is toy and family_of("toy_scale_backward") is toy


def test_chosen_forced_and_without_native(toy):
    p = ToyProblem(100_000)
    d = decide("toy_scale", p, H200)
    # Triton is faster per call, but its compile would stall the first call.
    assert d.candidates[0].backend == "triton" and d.choice.backend == "native"
    assert "JIT on first use" in d.reason
    assert decide("toy_scale", p, H200, "triton").choice.config == ToyConfig(2)
    d = decide("toy_scale", p, H200, native_available=False)
    assert d.choice.backend == "triton" and "not built" in d.reason
    with pytest.raises(ValueError, match="no vendor candidate here: no vendor library scales toys; "
                                         "backends with candidates: native, triton"):
        decide("toy_scale", p, H200, "vendor")
    with pytest.raises(TypeError, match="ToyProblem"):
        decide("toy_scale", 5, H200)
    # 10x faster per call: the compile, paid once, pays off.
    d = decide("toy_scale", ToyProblem(10**7), H200)
    assert d.choice.backend == "triton" and "pays off" in d.reason


def test_explained_for_its_bucket(toy, capsys):
    torch = pytest.importorskip("torch")
    from mymetaops import explain
    decisions = explain("toy_scale", torch.empty(1000, device="meta"), device="H200", backward=True)
    assert [d.op for d in decisions] == ["toy_scale", "toy_scale_backward"]
    assert all(d.problem == ToyProblem(512) for d in decisions)  # 1000 is in the bucket of 512-1023
    out = capsys.readouterr().out
    assert "problem: 1000 toy elements" in out and "bucket (10,)" in out and "512 toy elements" in out
    assert out.count("choice: native width1") == 2 and "+250 ms JIT" in out
    assert explain("toy_scale", torch.empty(1000, device="meta"), device="H200", backend="triton",
                   print_result=False)[0].choice.backend == "triton"


def test_cli_explain_and_regret(toy, capsys):
    assert main(["explain", "toy_scale", "--device", "H200", "--n", "3000", "--backward"]) == 0
    out = capsys.readouterr().out
    assert "toy_scale_backward on H200" in out and "bucket (12,)" in out and out.count("choice:") == 2
    assert main(["explain", "toy_scale", "--device", "H200", "--n", "3000", "--backend", "vendor"]) == 2
    assert "no vendor library scales toys" in capsys.readouterr().err
    assert main(["regret", "toy", "--device", "H200", "--samples", "50"]) == 0
    out = capsys.readouterr().out
    assert "toy_scale " in out and "toy_scale_backward" in out


def test_gone_after_unregister():
    with pytest.raises(ValueError, match="unknown op"):
        decide("toy_scale", ToyProblem(1), H200)
