"""numba kernel of ``scatter`` and ``scatter_add`` along the last dimension: a training graph's max-pool backward.

`fxkit.transforms.grad` differentiates ``max_pool2d`` by scattering each
output's gradient to the input position its indices name: ``scatter`` (or
``scatter_add`` where windows overlap) of the ``(N, C, OH*OW)`` gradient into
zeros of ``(N, C, H*W)`` along the last dimension. numpy runs the adding one
as ``np.add.at``, an unbuffered loop that took 3.5 ms for ResNet-18's pool in
a batch-8 training step at 64x64; this loop writes each value once on the
calling thread.

Imported by `fxkit.backends.scatter_lowering` only when a numba specialisation
lowers a scatter: numba takes ~0.5 s to import.
"""
import numba
import numpy as np

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@numba.njit(**_JIT)
def scatter_rows(out, index, src, add):
    """``out[r, index[r, j]] = src[r, j]`` (``+=`` when ``add``) for every row ``r``, in order.

    Args:
        out: ``(R, L)``, C-contiguous, holding the scatter's input; written in place.
        index: ``(R, J)`` int64, C-contiguous.
        src: ``(R, J)``, C-contiguous, ``out``'s dtype.
        add: add repeated indices up (``scatter_add``) instead of keeping the last write.

    Returns:
        True, or False at the first index outside ``[0, L)`` (``out`` is then partly written: the caller
        runs the eager op instead, for its error).
    """
    rows, length = out.shape
    for r in range(rows):
        for j in range(index.shape[1]):
            i = index[r, j]
            if i < 0 or i >= length:
                return False
            if add:
                out[r, i] += src[r, j]
            else:
                out[r, i] = src[r, j]
    return True


def warm(dtype):
    """Compile `scatter_rows` for ``dtype`` now (the specialisation's compile time, not its first call)."""
    scatter_rows(np.zeros((1, 1), dtype), np.zeros((1, 1), np.int64), np.zeros((1, 1), dtype), True)
