"""Inputs, the float64 reference and the tolerances for the embedding_bag tests."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

# Relative to the sum of |terms| of each output element: the output's rounding plus fp32 summation.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
TABLE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


@dataclass
class Case:
    """One embedding_bag call in F.embedding_bag's terms."""

    weight: torch.Tensor
    input: torch.Tensor
    offsets: torch.Tensor | None
    mode: str
    per_sample_weights: torch.Tensor | None
    include_last_offset: bool
    padding_idx: int | None

    def kwargs(self):
        return dict(offsets=self.offsets, mode=self.mode, per_sample_weights=self.per_sample_weights,
                    include_last_offset=self.include_last_offset, padding_idx=self.padding_idx)

    def to(self, device):
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Case(move(self.weight), move(self.input), move(self.offsets), self.mode,
                    move(self.per_sample_weights), self.include_last_offset, self.padding_idx)

    def op_bags(self):
        """(indices, offsets, include_last_offset) in the op's form: the case's own offsets (either
        form) for 1-D input, torch-form offsets for 2-D input; the input's dtype."""
        if self.input.dim() == 2:
            b, length = self.input.shape
            offsets = torch.arange(b, device=self.input.device) * length
            return self.input.reshape(-1), offsets.to(self.input.dtype), False
        return self.input, self.offsets, self.include_last_offset

    def bags(self):
        """(indices, offsets with num_bags + 1 entries), int64, as the op sees them."""
        if self.input.dim() == 2:
            b, length = self.input.shape
            return self.input.reshape(-1).long(), torch.arange(b + 1) * length
        offsets = self.offsets.long().cpu()
        if not self.include_last_offset:
            offsets = torch.cat([offsets, torch.tensor([self.input.numel()])])
        return self.input.long().cpu(), offsets


def make_case(seed, num_rows, dim, bag_sizes, dtype=torch.float32, index_dtype=torch.int64,
              mode="sum", weighted=False, include_last_offset=False, padding=False,
              fixed_size=False, layout="contiguous", device="cpu"):
    g = torch.Generator().manual_seed(seed)
    if layout == "row_strided":  # a column slice of a wider table: row stride > dim
        weight = torch.randn(num_rows, dim + 5, generator=g)[:, 2:dim + 2]
    elif layout == "transposed":  # column stride != 1: the op has to make it contiguous
        weight = torch.randn(dim, num_rows, generator=g).t()
    else:
        weight = torch.randn(num_rows, dim, generator=g)
    weight = weight.to(dtype)
    n = sum(bag_sizes)
    indices = torch.randint(0, num_rows, (n,), generator=g, dtype=torch.int64)
    padding_idx = None
    if padding:
        padding_idx = int(torch.randint(0, num_rows, (1,), generator=g))
        hits = torch.rand(n, generator=g) < 0.3
        indices[hits] = padding_idx
        if num_rows > 1 and torch.rand(1, generator=g) < 0.5:
            padding_idx -= num_rows  # torch accepts negative padding_idx
    psw = torch.randn(n, generator=g).to(dtype) if weighted else None
    if fixed_size:
        length = bag_sizes[0] if bag_sizes else 0
        input = indices.reshape(len(bag_sizes), length) if bag_sizes else indices.reshape(0, 0)
        return Case(weight.to(device), input.to(index_dtype).to(device), None, mode,
                    None if psw is None else psw.reshape(input.shape).to(device), False,
                    padding_idx)
    starts = torch.tensor([0] + list(bag_sizes), dtype=torch.int64).cumsum(0)
    offsets = starts if include_last_offset else starts[:-1]
    return Case(weight.to(device), indices.to(index_dtype).to(device),
                offsets.to(index_dtype).to(device), mode,
                None if psw is None else psw.to(device), include_last_offset, padding_idx)


@st.composite
def cases(draw, max_rows=60, dims=(1, 3, 4, 8, 16, 130), max_bags=6, max_bag_size=40):
    num_rows = draw(st.integers(1, max_rows))
    fixed_size = draw(st.booleans())
    num_bags = draw(st.integers(0, max_bags))
    if fixed_size:
        bag_sizes = [draw(st.integers(0, max_bag_size))] * num_bags
    else:
        bag_sizes = draw(st.lists(st.integers(0, max_bag_size), min_size=num_bags, max_size=num_bags))
    mode = draw(st.sampled_from(["sum", "mean"]))
    return make_case(
        seed=draw(st.integers(0, 2**31 - 1)), num_rows=num_rows, dim=draw(st.sampled_from(dims)),
        bag_sizes=bag_sizes, dtype=draw(st.sampled_from(TABLE_DTYPES)),
        index_dtype=draw(st.sampled_from(INDEX_DTYPES)), mode=mode,
        weighted=mode == "sum" and draw(st.booleans()),
        include_last_offset=draw(st.booleans()), padding=draw(st.booleans()),
        fixed_size=fixed_size,
        layout=draw(st.sampled_from(["contiguous", "row_strided", "transposed"])))


def reference_pool(case: Case, weight: torch.Tensor, psw: torch.Tensor | None) -> torch.Tensor:
    """The forward in plain differentiable torch ops (any dtype; psw flat or None)."""
    indices, offsets = case.bags()
    num_rows, num_bags = weight.shape[0], offsets.numel() - 1
    bags = torch.searchsorted(offsets, torch.arange(indices.numel()), right=True) - 1
    used = (bags >= 0) & (bags < num_bags)
    if case.padding_idx is not None:
        used &= indices != case.padding_idx % num_rows
    terms = weight[indices[used]]
    if psw is not None:
        terms = terms * psw[used, None]
    out = weight.new_zeros(num_bags, weight.shape[1]).index_add(0, bags[used], terms)
    if case.mode == "mean":
        out = out / torch.bincount(bags[used], minlength=num_bags).clamp(min=1)[:, None]
    return out


def reference(case: Case, grad_output: torch.Tensor | None = None, absolute: bool = False):
    """float64 forward (and gradients of weight and per_sample_weights for grad_output).

    absolute=True sums |terms| instead: the scale that the tolerance is relative to.
    """
    weight = case.weight.detach().cpu().double()
    weight = (weight.abs() if absolute else weight).requires_grad_()
    psw = None
    if case.per_sample_weights is not None:
        psw = case.per_sample_weights.detach().cpu().double().reshape(-1)
        psw = (psw.abs() if absolute else psw).requires_grad_()
    out = reference_pool(case, weight, psw)
    if grad_output is None:
        return out.detach()
    grad = grad_output.detach().cpu().double()
    out.backward(grad.abs() if absolute else grad)
    return out.detach(), weight.grad, None if psw is None else psw.grad


def assert_close(actual, expected, scale, dtype, what=""):
    """|actual - expected| <= TOLERANCE[dtype] * scale (+ the dtype's subnormal spacing)
    elementwise, and no NaN anywhere."""
    actual = actual.detach().cpu().double()
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert not actual.isnan().any(), f"{what}: NaN in the result (an element left unwritten?)"
    err = (actual - expected).abs()
    finfo = torch.finfo(dtype)
    bound = TOLERANCE[dtype] * scale + finfo.smallest_normal * finfo.eps  # + subnormal spacing
    worst = (err - bound).argmax() if err.numel() else None
    assert (err <= bound).all(), (
        f"{what}: max error {err.max():.3g} over bound at {worst}: got "
        f"{actual.flatten()[worst]:.6g}, expected {expected.flatten()[worst]:.6g}")
