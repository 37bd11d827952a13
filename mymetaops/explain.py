"""`mymetaops.explain`: the model's decision for a call, printed, without running anything."""
from __future__ import annotations

import torch

from mymetaops import model
from mymetaops.ops import embedding_bag as _embedding_bag


def _hardware(device, tensors):
    if isinstance(device, str) and not device.startswith(("cuda", "cpu", "meta")):
        return model.get_hardware(device), True  # a named GPU, present or not
    if device is None:
        device = next((t.device for t in tensors if t.is_cuda), None)
        if device is None and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
    if device is None:
        raise RuntimeError("mymetaops.explain: no GPU here; name one, e.g. device='MI350X' "
                           f"(known: {', '.join(model.HARDWARE)})")
    return model.detect_hardware(torch.device(device)), _embedding_bag.native_available()


def explain(op: str, *args, device=None, backward: bool = False, backend: str | None = None,
            print_result: bool = True, **kwargs) -> list[model.Decision]:
    """Print each candidate's predicted time and bound, and the choice, for `op(*args, **kwargs)`.

    The arguments are those of the wrapper (e.g. `mymetaops.embedding_bag`); tensors may be meta
    tensors. `device` is a torch device or a GPU name from `mymetaops.model.HARDWARE` (e.g. "MI350X")
    that need not be present. backward=True adds the decisions of the backward kernels.
    """
    if op != "embedding_bag":
        raise ValueError(f"mymetaops.explain: unknown op {op!r}; known: embedding_bag")
    decisions = _explain_embedding_bag(*args, device=device, backward=backward, backend=backend,
                                       **kwargs)
    if print_result:
        print("\n\n".join(model.format_decision(d) for d in decisions))
    return decisions


def _explain_embedding_bag(input, weight, offsets=None, *, mode="mean", per_sample_weights=None,
                           include_last_offset=False, device=None, backward=False, backend=None,
                           **unused):
    indices, offsets = _embedding_bag._bags(input, offsets, include_last_offset)
    hardware, native = _hardware(device, (weight, indices))
    mode_id = _embedding_bag.MODES[mode]
    problem = _embedding_bag.problem_of(weight, indices, offsets, mode_id,
                                        per_sample_weights is not None)
    backend = backend or _embedding_bag.current_backend()
    ops = ["embedding_bag"]
    if backward:
        ops.append("embedding_bag_backward")
        if per_sample_weights is not None:
            ops.append("embedding_bag_per_sample_weights_backward")
    return [model.decide(op, problem, hardware, backend=backend, native_available=native)
            for op in ops]
