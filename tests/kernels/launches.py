"""Counting the kernels a piece of torch code would launch on a GPU, on any device: every aten op that
computes (a view, an alias or an allocation launches nothing) and every Triton kernel launch (compiled or
in the interpreter), in order. On a CPU this is the CUDA path's count where the code runs the same ops
there (the fixed-shape step with the CUDA plan's kernels, test_step_launches.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that allocate or describe a tensor without a kernel
NO_KERNEL = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh", "sym_size",
             "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size", "_local_scalar_dense", "promote_types",
             "result_type", "_unsafe_view"}


class _Aten(TorchDispatchMode):
    def __init__(self, out: list[str]):
        super().__init__()
        self.out, self.paused = out, 0  # paused: inside a Triton launch (the interpreter's own copies)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not (self.paused or func.is_view or name in NO_KERNEL):
            self.out.append(f"aten.{name}")
        return func(*args, **(kwargs or {}))


@contextmanager
def launches() -> Iterator[list[str]]:
    """Inside: the kernels launched, by name ("aten.mm", "triton._rope_write"), appended to the list."""
    out: list[str] = []
    mode = _Aten(out)
    patched = []
    try:
        from triton.runtime import interpreter, jit

        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            original = cls.__getitem__

            def record(self, grid, original=original):
                launch = original(self, grid)

                def run(*args, **kw):
                    out.append(f"triton.{getattr(self, '__name__', None) or self.fn.__name__}")
                    mode.paused += 1
                    try:
                        return launch(*args, **kw)
                    finally:
                        mode.paused -= 1
                return run
            cls.__getitem__ = record
            patched.append((cls, original))
    except ImportError:  # (no triton: only aten ops run)
        pass
    try:
        with mode:
            yield out
    finally:
        for cls, original in patched:
            cls.__getitem__ = original
