"""The family registry: one op family = one module that tells the model everything specific to it.

Selection (`decide`), forced backends, `explain`, the CLI and the regret report only talk to the
`Family` interface below, so a new family adds a module (and its name to FAMILY_MODULES) and edits
nothing shared. A family module subclasses `Family`, sets `name`, `ops` and `problem_type`, defines
the abstract methods, and calls `register(TheFamily())` at import time.

Problems must be hashable and immutable (frozen dataclasses): decisions are cached on them.
"""
from __future__ import annotations

import abc
import argparse
import importlib
import random
from typing import Any, Iterable, NamedTuple

from .hardware import HardwareSpec

BACKENDS = ("native", "triton", "vendor")
# Imported by `import mymetaops.model`: each registers its family.
FAMILY_MODULES = ("mymetaops.model.embedding_bag", "mymetaops.model.gemm", "mymetaops.model.quantize_fp8",
                  "mymetaops.model.jagged", "mymetaops.model.attention")


class Estimate(NamedTuple):  # a tuple, not a dataclass: built for every candidate, so kept cheap
    time_us: float  # one call, steady state (compilation is the selection's business)
    bound: str  # "memory" | "latency" | "compute" | "launch"
    detail: str
    margin: float  # bytes in flight / bytes in flight that saturate memory (robustness tie-break)
    registers: int  # per thread (robustness tie-break); 0 where unknown
    pieces: int  # pieces a row or tile is fetched in (robustness tie-break)
    # The kernel's own time where time_us is a floor it does not reach (the host path of a tiny
    # call): candidates tied at the floor go to the faster kernel. 0: time_us is the kernel's.
    kernel_us: float = 0.0


class Family(abc.ABC):
    """What the model needs to know about one op family."""

    name: str  # e.g. "embedding_bag"; the CLI's `regret <name>`
    ops: tuple[str, ...]  # torch.ops.mymetaops names the family's candidates are for
    problem_type: type  # what every method below takes and returns as a problem

    @abc.abstractmethod
    def candidates(self, op: str, problem: Any, hw: HardwareSpec) -> Iterable[tuple[str, Any, Estimate]]:
        """(backend, config, estimate) of every candidate that can run `problem`: native kernel
        configs, Triton configs, and the vendor op where one takes these arguments. `config` is a
        hashable mymetaops.configs object whose `as_list()` the dispatch passes to the kernel."""

    @abc.abstractmethod
    def describe(self, problem: Any) -> str:
        """One line for `explain`."""

    @abc.abstractmethod
    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The CLI arguments of `explain <op>` that describe a problem (the CLI adds --device,
        --backend, --backward, --no-native and --show)."""

    @abc.abstractmethod
    def problem_from_args(self, op: str, args: argparse.Namespace) -> Any:
        """The problem the CLI arguments describe."""

    @abc.abstractmethod
    def problem_from_call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """The problem of a call of the public wrapper of `op` with these arguments (tensors may
        be meta tensors): exactly what the dispatch would build."""

    def backward_ops(self, op: str, problem: Any) -> list[tuple[str, Any]]:
        """(op, problem) of the kernels the backward of `op` on `problem` runs (explain's
        backward=True, the CLI's --backward)."""
        return []

    def missing_backend_note(self, op: str, backend: str) -> str:
        """Why `op` has no candidate of `backend`, for the error when that backend is forced."""
        return ""

    def absent_reason(self, op: str, problem: Any, hw: HardwareSpec, backend: str) -> str:
        """Why `problem` gets no candidate of `backend` on `hw` (explain and the forced-backend
        error say it); by default the op-level note."""
        return self.missing_backend_note(op, backend)

    @abc.abstractmethod
    def bucket_key(self, op: str, problem: Any) -> tuple[int, ...]:
        """The dispatch decides once per bucket: sizes rounded to what changes the choice. The
        dispatch's hot path computes the same key (in C++), so keep it integer- and float-exact."""

    @abc.abstractmethod
    def problem_from_key(self, op: str, key: tuple[int, ...]) -> Any:
        """The representative problem of a bucket: what the dispatch decides for."""

    @abc.abstractmethod
    def sample(self, op: str, rng: random.Random) -> Any:
        """A realistic random problem of `op`, for the regret report."""


_FAMILIES: dict[str, Family] = {}
_OP_FAMILY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add a family (replacing one of the same name); its ops must not belong to another."""
    if not family.name or not family.ops:
        raise ValueError("a family needs a name and at least one op")
    for op in family.ops:
        owner = _OP_FAMILY.get(op)
        if owner is not None and owner.name != family.name:
            raise ValueError(f"op {op!r} already belongs to family {owner.name!r}")
    if family.name in _FAMILIES:
        unregister(family.name)
    _FAMILIES[family.name] = family
    _OP_FAMILY.update(dict.fromkeys(family.ops, family))
    return family


def unregister(name: str) -> None:
    family = _FAMILIES.pop(name)
    for op in family.ops:
        del _OP_FAMILY[op]


def families() -> tuple[Family, ...]:
    return tuple(_FAMILIES.values())


def all_ops() -> tuple[str, ...]:
    return tuple(_OP_FAMILY)


def get_family(name: str) -> Family:
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown family {name!r}; known: {', '.join(_FAMILIES)}") from None


def family_of(op: str) -> Family:
    try:
        return _OP_FAMILY[op]
    except KeyError:
        raise ValueError(f"unknown op {op!r}; known: {', '.join(_OP_FAMILY)}") from None


for _module in FAMILY_MODULES:
    importlib.import_module(_module)
