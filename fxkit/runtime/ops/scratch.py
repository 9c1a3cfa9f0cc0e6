"""Scratch memory that a kernel's temporaries reuse from call to call, one buffer per role.

A convolution on a small map copies its input and gathers its columns into temporaries of a
few hundred KB, used once and freed. With BLAS running on two threads, each such array costs
more fresh than the work done in it: glibc hands sizes like these out with mmap (or grows and
trims its heap around them), and every map and unmap makes the kernel fault pages in and
flush the TLBs of the other core, where the BLAS worker spins. Gathering the digits Net's
4x4 conv into a fresh array and multiplying takes 0.28 ms; into a reused one, 0.15 ms
(2 cores). PyTorch's kernels keep a scratchpad for the same reason.

Each thread keeps one growing byte buffer per role; `scratch` returns a view of it. The caller
owns the view until its next call for the same role, so a temporary from here must never
escape the op that asked for it (results are always fresh arrays).
"""
import threading

import numpy as np

_LOCAL = threading.local()


def scratch(xp, role, shape, dtype):
    """An uninitialised ``shape``/``dtype`` array over this thread's buffer for ``role`` (numpy);
    a fresh ``xp.empty`` on other array modules (cupy pools its memory itself)."""
    if xp is not np:
        return xp.empty(shape, dtype)
    dtype = np.dtype(dtype)
    count = 1
    for n in shape:
        count *= n
    size = count * dtype.itemsize
    buffers = getattr(_LOCAL, "buffers", None)
    if buffers is None:
        buffers = _LOCAL.buffers = {}
    buffer = buffers.get(role)
    if buffer is None or buffer.size < size:
        buffer = buffers[role] = np.empty(max(size, 64), np.uint8)
    return buffer[:size].view(dtype).reshape(shape)


def gathered(xp, role, view, shape):
    """``view`` copied into scratch for ``role`` and reshaped to ``shape`` (what ``view.reshape(shape)``
    gives when it must copy, without a fresh allocation)."""
    out = scratch(xp, role, view.shape, view.dtype)
    out[...] = view
    return out.reshape(shape)
