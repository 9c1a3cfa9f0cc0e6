"""`KernelCall`: one generated numba kernel as a function of raw arrays, with reused outputs.

Generated code calls a fused group like a ufunc, ``mul_9 = fused_0(x)``;
`KernelCall` picks the kernel's entry point (``kernel`` when every array is
C-contiguous; ``kernel`` over permuted views when an elementwise kernel's
arrays are all dense in one axis order, like transposes; ``kernel`` over
copies when they have contiguous rows; ``kernel_strided`` otherwise; a
kernel without a strided entry gets contiguous copies), provides the output
arrays and runs it.

Output buffers and aliasing: writing a fresh 64 MB output costs ~30 ms of
page faults, as much as the arithmetic, so each call site keeps the outputs
it made (up to `POOL` per output) and writes into one again when nothing
outside the pool refers to it any more: neither the caller (a result it
kept, a Tensor around it, a view of it) nor generated code. The contract:
**a result is never overwritten while anything references it** (the rule of
`fxkit.backends.memory_plan`, checked here at run time); a caller who
keeps every result gets fresh arrays, one who drops them gets the same memory
back. The test is CPython's reference count of the buffer, so it also holds
with several threads calling one compiled module: a buffer is counted as
taken from the moment a call picks it.
"""
import sys

import numpy as np

from fxkit.runtime.meta import TensorMeta

POOL = 2
"""Buffers kept per kernel output: two let ``y = f(x)`` in a loop alternate without allocating."""
_FREE = 3  # references to a free pooled buffer while `_take` looks at it: the pool, the loop, the call


class KernelCall:
    """Calls one compiled kernel on raw arrays and returns its output(s).

    Args:
        name: the fused op's name (``fused_0``); the generated code's global.
        kernel: the `KernelSource` it was compiled from.
        module: the imported kernel module (``kernel``, maybe ``kernel_strided``).
    """

    __slots__ = ("__name__", "kernel", "_contiguous", "_strided", "_arrays", "_outputs", "_pools", "_single",
                 "_permutable")

    def __init__(self, name, kernel, module):
        self.__name__ = name
        self.kernel = kernel
        self._contiguous = module.kernel
        self._strided = getattr(module, "kernel_strided", None)
        self._arrays = tuple(i for i, m in enumerate(kernel.inputs) if isinstance(m, TensorMeta))
        self._outputs = [(tuple(m.shape), m.dtype.np) for m in kernel.outputs]
        self._pools = [[] for _ in kernel.outputs]
        self._single = len(kernel.outputs) == 1
        # Runs on permuted views need every array and output at one shape (no broadcasting).
        shapes = {tuple(m.shape) for m in kernel.inputs + kernel.outputs if isinstance(m, TensorMeta)}
        self._permutable = kernel.elementwise and len(shapes) == 1 and len(next(iter(shapes))) > 1

    def __call__(self, *args, out=None):
        """Run the kernel; ``out``: a dead buffer of the single output's shape and dtype the memory plan
        gives, written when it and every argument are C-contiguous or all permuted alike, else a
        pooled buffer.

        An ``out`` that is also an argument (``fused_0(conv2d, out=conv2d)``) is not written: LLVM
        vectorises a kernel's loop only behind a run-time check that its output and inputs do not
        overlap, so in place it runs the scalar loop (a silu over 401408 float32: 2.9 ms in place,
        0.26 ms into another buffer); a pooled buffer costs no page faults after its first use.
        """
        if out is not None and any(args[i] is out for i in self._arrays):
            out = None
        entry = self._contiguous
        if out is not None and out.flags.c_contiguous and all(args[i].flags.c_contiguous for i in self._arrays):
            entry(out, *args)
            return out
        for i in self._arrays:
            if not args[i].flags.c_contiguous:
                order = self._dense_order(args) if self._permutable else None
                if order is not None:
                    return self._call_permuted(args, order, out)
                if self._strided is not None and not self._rows_contiguous(args):
                    entry = self._strided
                else:
                    args = tuple(np.ascontiguousarray(a) if k in self._arrays else a for k, a in enumerate(args))
                break
        if self._single:
            out = self._take(0)
            entry(out, *args)
            return out
        outs = [self._take(k) for k in range(len(self._outputs))]
        entry(*outs, *args)
        return tuple(outs)

    def _dense_order(self, args):
        """The axis order in which every array argument is C-contiguous (``x.T``'s is reversed),
        or None when they do not share one.

        Size-1 dimensions stay where they are (their strides are arbitrary): the
        kernel was generated for the call's shape and reads the extents of the
        other dimensions by position, so only those may trade places.
        """
        first = args[self._arrays[0]]
        moving = [d for d in range(first.ndim) if first.shape[d] != 1]
        order = list(range(first.ndim))
        for position, d in zip(moving, sorted(moving, key=lambda d: -first.strides[d])):
            order[position] = d
        order = tuple(order)
        for i in self._arrays:
            if not args[i].transpose(order).flags.c_contiguous:
                return None
        return order

    def _call_permuted(self, args, order, out=None):
        """Run the contiguous entry on the arguments' memory order, the results laid out like them.

        Each output element depends only on the inputs at its position, so the
        kernel may visit positions in any order: over ``x.transpose(order)``
        (C-contiguous) it streams every array once, where the strided entry
        walked transposes against their strides (14x slower over 16e6
        elements). The results are views of the pooled buffers with the
        arguments' strides, as numpy's and PyTorch's elementwise ops lay them out.
        """
        inverse = tuple(np.argsort(order))
        args = tuple(a.transpose(order) if k in self._arrays else a for k, a in enumerate(args))
        shape = args[self._arrays[0]].shape
        if out is not None and self._single and out.transpose(order).flags.c_contiguous:
            views = [out.transpose(order)]  # the dead buffer the memory plan gives, laid out like the inputs
        else:
            views = [self._take(k).reshape(shape) for k in range(len(self._outputs))]
        self._contiguous(*views, *args)
        results = tuple(v.transpose(inverse) for v in views)
        return results[0] if self._single else results

    def _rows_contiguous(self, args):
        """Whether every array argument has contiguous rows (``chunk``'s and ``x[:, a:b]``'s views).

        Such views are copied for the contiguous entry: numba types the strided
        entry's arrays with unknown layout and LLVM does not vectorise it, so
        its loops ran 7x slower than copying rows (a memcpy each) and running
        the SIMD loops (an LSTM cell's gates, 32x256). Transposes, steps and
        broadcasts, whose copies gather, keep the strided entry.
        """
        for i in self._arrays:
            a = args[i]
            if a.ndim and a.shape[-1] > 1 and a.strides[-1] != a.itemsize:
                return False
        return True

    def _take(self, k):
        pool = self._pools[k]
        for buf in pool:
            if sys.getrefcount(buf) == _FREE:
                return buf
        shape, dtype = self._outputs[k]
        buf = np.empty(shape, dtype)
        if len(pool) < POOL:
            pool.append(buf)
        return buf

    def compile(self, signature):
        """Compile the contiguous entry point for ``signature`` (numba types) ahead of the first call."""
        self._contiguous.compile(signature)

    def compiled_signatures(self):
        """The argument types numba compiled each entry point for (for tests and inspection)."""
        entries = [self._contiguous] + ([self._strided] if self._strided is not None else [])
        return {e.__name__: list(e.signatures) for e in entries}

    def __repr__(self):
        return f"<numba kernel {self.__name__}>"
