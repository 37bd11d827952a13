"""Launching a compiled Triton kernel without `JITFunction.run`'s per-call work.

`kernel[grid](*args, **meta)` binds every argument again, specializes each one, builds a cache key
from all of them and the options, and checks the kernel's globals: 80-100 us a launch with the
attention kernels' ~30 arguments on the H200's host (bench/attention/NOTES.md), more than the GPU
time of most recommender-sized attention calls. A `Launcher` holds one kernel with one fixed meta
(constexprs and options; the caller keeps one per plan), keys the compiled kernel by what Triton
specializes a runtime argument on -- a tensor's dtype and 16-byte alignment; an int's value 1,
divisibility by 16 and 32-bit range; None -- and calls the compiled kernel's launcher directly:
`compiled.run(grid, stream, function, packed metadata, ...)`, the call `JITFunction.run` itself
ends with (the same in Triton 3.6 and 3.8). The key comes from a function generated for the kinds
of arguments of the first call (one expression per argument, no call per argument): a few us
instead of ~0.4 us an argument through a generic one.

A key not seen yet goes through `kernel[grid]` once, which compiles or finds the kernel, launches
it and returns it; so do arguments of other kinds than the first call's (the generated key
raises), every launch under the interpreter, a device that is not the current one,
and every launch while triton.knobs holds a launch hook (a profiler's hooks need the launch
metadata the direct call leaves out). On the H200 an empty kernel costs 7.8 us of host time a
launch this way, 12.3 through kernel[grid] (bench/attention/NOTES.md, run 7).
"""
from __future__ import annotations

import torch
import triton
from triton import knobs


def _other_kind():
    raise TypeError("an argument of another kind than the first call's")


def _term(i: int, a) -> str:
    """The key expression of argument i, of a's kind: everything Triton's specialization of it
    reads (ints: 0..16 as themselves, so the value 1 stays apart; others by divisibility by 16
    and 32-bit range). An argument of another kind raises (TypeError, AttributeError)."""
    name = f"a{i}"
    if a is None or isinstance(a, (bool, float)):
        kind = "type(None)" if a is None else type(a).__name__
        return f"(0 if {name}.__class__ is {kind} else _other_kind())"
    if isinstance(a, int):
        return (f"(_other_kind() if {name}.__class__ is not int else {name} if 0 <= {name} <= 16 "
                f"else ({name} & 15 == 0, -2147483648 <= {name} < 2147483648))")
    return f"{name}.dtype, {name}.data_ptr() & 15"


def _key_function(args: tuple):
    names = ", ".join(f"a{i}" for i in range(len(args)))
    source = f"def key({names}):\n    return ({', '.join(_term(i, a) for i, a in enumerate(args))},)\n"
    namespace: dict = {"_other_kind": _other_kind}
    exec(source, namespace)  # noqa: S102 (generated from argument kinds only)
    return namespace["key"]


def _hooked() -> bool:
    """Whether a launch hook is set: Triton 3.6 and 3.8 keep a HookChain (never None), whose calls
    list is empty until a profiler adds one."""
    hook = knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


class Launcher:
    """`kernel[grid](*args, **meta)` for one kernel and one meta (its constexprs and the num_warps /
    num_stages options); grid: 1 to 3 ints; args: the runtime arguments, positional, in the kernel's
    order before its constexprs (as every kernel of this package declares them)."""

    def __init__(self, kernel, meta: dict):
        self.kernel = kernel
        self.meta = dict(meta)
        self._direct = isinstance(kernel, triton.runtime.JITFunction)
        # The compiled launcher takes every parameter in signature order, constexprs included.
        self._constexprs = tuple(self.meta[p.name] for p in kernel.params if p.is_constexpr) if self._direct else ()
        self._key = None
        self._compiled = {}  # (device index, key) -> compiled kernel

    def _jit(self, grid: tuple, device: torch.device, args: tuple):
        with torch.cuda.device(device):
            return self.kernel[grid](*args, **self.meta)

    def __call__(self, grid: tuple, device: torch.device, *args) -> None:
        if not self._direct or _hooked():
            self.kernel[grid](*args, **self.meta)
            return
        if self._key is None:
            self._key = _key_function(args)
        index = device.index
        if index is None:
            index = torch.cuda.current_device()
        try:
            key = (index, self._key(*args))
        except (AttributeError, TypeError):  # an argument of another kind than the first call's
            self._jit(grid, device, args)
            return
        compiled = self._compiled.get(key)
        if compiled is None or index != torch.cuda.current_device():
            compiled = self._compiled[key] = self._jit(grid, device, args)
            return
        compiled.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                     torch._C._cuda_getCurrentRawStream(index), compiled.function, compiled.packed_metadata,
                     None, None, None, *args, *self._constexprs)
