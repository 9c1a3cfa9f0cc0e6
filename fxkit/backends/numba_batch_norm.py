"""numba kernels of training-mode batch norm and its gradient, over the memory of a conv's result as it lies.

Eager ``batch_norm`` (training) and ``batch_norm_training_backward`` reshape
their input to ``(N, C, pixels)``: on the numba backend's channels-last or
channel-major conv results that reshape copies the whole activation (twice
in the backward, input and gradient), and the statistics and the gradient's
affine map take about ten numpy passes more. Here each is three passes over
the data in its own layout, statistics accumulated in float64:

* **rows** ``(R, C)`` (channels-last memory, or a ``(N, C)`` batch): the
  inner loop runs along the contiguous channels, one accumulator per channel
  (`fxkit.runtime.ops.channel_loops.rows_moments` with planes of one value);
* **planes** ``(B, C, P)`` (NCHW memory with ``B = N``, channel-major memory
  with ``B = 1``): each channel's plane is one contiguous run, summed with
  reassociation allowed (``fastmath={"reassoc"}``) so LLVM vectorises it
  (`fxkit.runtime.ops.channel_loops.planes_moments`, eager batch norm's too).

Pass one: the mean, the variance and, backward, the sums of ``g`` and
``g * (x - mean)``, all from float64 sums about each channel's first value
(no cancellation to speak of); pass two writes the result. On the calling thread, as every kernel that runs
between BLAS products (see `fxkit.backends.numba_conv`).

Imported by `fxkit.backends.batch_norm_lowering` only when a numba
specialisation lowers a training batch norm: numba takes ~0.5 s to import.
"""
import numba
import numpy as np

from fxkit.runtime.ops.channel_loops import planes_moments, rows_moments

_JIT = {"cache": True, "nogil": True, "error_model": "numpy"}


@numba.njit(**_JIT)
def rows_forward(out, x, weight, bias, eps, mean, var):
    """``out = (x - mean) / sqrt(var + eps) * weight + bias`` per channel of ``x`` ``(R, C)``; the batch's
    ``mean`` and biased ``var`` (float64 ``(C,)``) are written too (the running statistics' update)."""
    unused = np.empty(x.shape[1])
    rows_moments(x, 1, mean, var, x, unused, unused, False)
    scale = weight / np.sqrt(var + eps)
    shift = bias - mean * scale
    rows, c = x.shape
    for r in range(rows):
        for k in range(c):
            out[r, k] = x[r, k] * scale[k] + shift[k]


@numba.njit(**_JIT)
def planes_forward(out, x, weight, bias, eps, mean, var):
    """`rows_forward` of ``x`` ``(B, C, P)``."""
    unused = np.empty(x.shape[1])
    planes_moments(x, mean, var, x, unused, unused, False)
    scale = weight / np.sqrt(var + eps)
    shift = bias - mean * scale
    b, c, p = x.shape
    for i in range(b):
        for k in range(c):
            for j in range(p):
                out[i, k, j] = x[i, k, j] * scale[k] + shift[k]


@numba.njit(**_JIT)
def _gradient_terms(count, weight, eps, var, sum_g, sum_gd):
    """Per channel ``(scale, a, b, grad_weight)`` of ``grad_input = scale * g + a * (x - mean) + b``."""
    invstd = 1.0 / np.sqrt(var + eps)
    grad_weight = sum_gd * invstd
    scale = invstd * weight
    return scale, -(scale * invstd) * (grad_weight / count), -scale * (sum_g / count), grad_weight



@numba.njit(**_JIT)
def rows_backward(grad_input, g, x, weight, eps, grad_weight, grad_bias):
    """The gradients of `rows_forward` given its output's gradient ``g`` (``x``'s layout): ``grad_input``
    ``(R, C)``, ``grad_weight`` and ``grad_bias`` ``(C,)`` are written."""
    rows, c = x.shape
    mean, var = np.empty(c), np.empty(c)
    sum_g, sum_gd = np.empty(c), np.empty(c)
    rows_moments(x, 1, mean, var, g, sum_g, sum_gd, True)
    scale, a, b, gw = _gradient_terms(rows, weight, eps, var, sum_g, sum_gd)
    for r in range(rows):
        for k in range(c):
            grad_input[r, k] = scale[k] * g[r, k] + a[k] * (x[r, k] - mean[k]) + b[k]
    grad_weight[:] = gw
    grad_bias[:] = sum_g


@numba.njit(**_JIT)
def planes_backward(grad_input, g, x, weight, eps, grad_weight, grad_bias):
    """`rows_backward` of ``(B, C, P)`` arrays."""
    n, c, p = x.shape
    mean, var = np.empty(c), np.empty(c)
    sum_g, sum_gd = np.empty(c), np.empty(c)
    planes_moments(x, mean, var, g, sum_g, sum_gd, True)
    scale, a, b, gw = _gradient_terms(n * p, weight, eps, var, sum_g, sum_gd)
    for i in range(n):
        for k in range(c):
            for j in range(p):
                grad_input[i, k, j] = scale[k] * g[i, k, j] + a[k] * (x[i, k, j] - mean[k]) + b[k]
    grad_weight[:] = gw
    grad_bias[:] = sum_g


def warm(dtype):
    """Compile every kernel for ``dtype`` now (the specialisation's compile time, not its first call)."""
    rows, planes, vec, stats = np.ones((2, 1), dtype), np.ones((1, 1, 2), dtype), np.ones(1, dtype), np.empty(1)
    rows_forward(rows.copy(), rows, vec, vec, 1e-5, stats, stats.copy())
    planes_forward(planes.copy(), planes, vec, vec, 1e-5, stats, stats.copy())
    rows_backward(rows.copy(), rows, rows, vec, 1e-5, vec.copy(), vec.copy())
    planes_backward(planes.copy(), planes, planes, vec, 1e-5, vec.copy(), vec.copy())

