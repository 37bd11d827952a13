"""`mymetaops.explain`: the model's decision for a call, printed, without running anything.

Light at import: the model is pure Python; torch and the dispatch are imported when explain runs.
"""
from __future__ import annotations

from mymetaops import model


def _native_available(op: str, vendor: str) -> bool:
    try:
        from mymetaops.ops.dispatch import native_available
    except ImportError:  # no dispatch, or no compiled extension: nothing native to run
        return False
    return native_available(op, vendor)


def _hardware(device, tensors):
    if isinstance(device, str) and not device.startswith(("cuda", "cpu", "meta")):
        return model.get_hardware(device), None  # a named GPU, present or not: its native kernels
    import torch

    if device is None:
        device = next((t.device for t in tensors if t.is_cuda), None)
        if device is None and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
    if device is None:
        raise RuntimeError("mymetaops.explain: no GPU here; name one, e.g. device='MI350X' "
                           f"(known: {', '.join(model.HARDWARE)})")
    return model.detect_hardware(torch.device(device)), False


def explain(op: str, *args, device=None, backward: bool = False, backend: str | None = None,
            print_result: bool = True, **kwargs) -> list[model.Decision]:
    """Print each candidate's predicted time and bound, and the choice, for `op(*args, **kwargs)`.

    The arguments are those of the wrapper (e.g. `mymetaops.embedding_bag`); tensors may be meta
    tensors. `device` is a torch device or a GPU name from `mymetaops.model.HARDWARE` (e.g. "MI350X")
    that need not be present. backward=True adds the decisions of the backward kernels.

    The dispatch decides once per bucket of problems, for the bucket's representative: that is the
    decision printed and returned (what runs), beside the exact problem of the call.
    """
    family = model.family_of(op)
    problem = family.problem_from_call(op, *args, **kwargs)
    todo = [(op, problem)] + (family.backward_ops(op, problem) if backward else [])
    tensors = [a for a in (*args, *kwargs.values()) if hasattr(a, "is_cuda")]
    hardware, named = _hardware(device, tensors)
    if backend is None:
        from mymetaops._backend import current_backend
        backend = current_backend()
    bucketed = [model.decide_bucketed(o, p, hardware, backend,
                                      True if named is None else _native_available(o, hardware.vendor))
                for o, p in todo]
    if print_result:
        print("\n\n".join(model.format_bucketed(b) for b in bucketed))
    return [b.decision for b in bucketed]
