"""numba kernel for a linear layer over few rows: each weight row streamed once, dot products in registers.

With a few rows (a ViT's 17 tokens at batch 1) a linear layer is a stream of
its weight: ``(17, 768) @ (768, 3072)`` reads 9.4 MB of weight for 40 M
multiply-adds. OpenBLAS still packs the weight into its panel layout first,
and measured 1.4x to 1.8x PyTorch's (MKL's) time at such shapes even with the
weight stored ``(in, out)`` (2 threads, minimum of 25 runs). Here the
weight stays in PyTorch's ``(out, in)`` layout, whose rows are the dot
products' contiguous operands: the kernel takes four weight rows at a time
and walks the input rows two at a time, eight sums over ``k`` kept in SIMD
registers (the sums may reassociate, as BLAS's blocked sums do), and adds
the bias as it stores: 0.76x to 0.89x OpenBLAS's time at those shapes on one
thread.

It runs on the calling thread only. Spread over numba's threads it took 0.63x
to 0.82x OpenBLAS's two-threaded time in a loop of calls, but inside a model
(ViT-B/16 at batch 1: 48 such products between other ops) each call wakes
numba's sleeping threads, and on the shared reference machine (load average
~4 on 2 cores) the forward took 2.7x as long as with OpenBLAS, whose threads
spin between products; ConvNeXt-T, alternating the two pools, 2.6x.

Imported by `fxkit.backends.linear_lowering` only when a numba specialisation
picks this kernel: numba takes ~0.5 s to import.
"""
import numba
import numpy as np

_JIT = {"cache": True, "nogil": True, "error_model": "numpy", "fastmath": {"reassoc", "contract"}}


@numba.njit(**_JIT)
def _store(out, bias, m, n, end, first, second):
    """Output column ``n`` (if below ``end``) of input rows ``m`` and ``m + 1`` (if there is one)."""
    if n < end:
        out[m, n] = first + bias[n]
        if m + 1 < out.shape[0]:
            out[m + 1, n] = second + bias[n]


@numba.njit(**_JIT)
def few_rows_linear(out, x, w, bias):
    """``out = x @ w.T + bias`` for C-contiguous ``x`` ``(M, K)``, ``w`` ``(N, K)``, ``bias`` ``(N,)``
    (zeros for a layer without one), ``out`` ``(M, N)``."""
    rows, depth = x.shape
    zero = out.dtype.type(0)
    end = w.shape[0]
    n = 0
    while n < end:
        w0 = w[n]
        w1 = w[min(n + 1, end - 1)]
        w2 = w[min(n + 2, end - 1)]
        w3 = w[min(n + 3, end - 1)]
        m = 0
        while m < rows:
            x0 = x[m]
            x1 = x[min(m + 1, rows - 1)]
            a00 = a01 = a02 = a03 = a10 = a11 = a12 = a13 = zero
            for k in range(depth):
                u = x0[k]
                v = x1[k]
                a00 += u * w0[k]
                a01 += u * w1[k]
                a02 += u * w2[k]
                a03 += u * w3[k]
                a10 += v * w0[k]
                a11 += v * w1[k]
                a12 += v * w2[k]
                a13 += v * w3[k]
            # NOTE: past the last weight or input row the sums repeat the last one and are not stored.
            _store(out, bias, m, n, end, a00, a10)
            _store(out, bias, m, n + 1, end, a01, a11)
            _store(out, bias, m, n + 2, end, a02, a12)
            _store(out, bias, m, n + 3, end, a03, a13)
            m += 2
        n += 4


def single_threaded():
    """Whether numba's kernels run on one thread (`few_rows_linear` then beats BLAS; see the module
    docstring)."""
    return numba.get_num_threads() == 1


def warm(dtype):
    """Compile `few_rows_linear` for ``dtype`` now (the specialisation's compile time, not its first call)."""
    out = np.zeros((1, 1), dtype)
    few_rows_linear(out, out, out, np.zeros(1, dtype))
