"""SGD's whole update in one pass over a large parameter: a numba loop reading the parameter, its gradient
and its momentum buffer once, and writing the parameter and the buffer once.

`SGD`'s array form makes four passes (scale the buffer, add the gradient, scale by the learning rate,
subtract), each over `fxkit.optim.optimizer.chunks`' cache-sized slices: on ResNet-18's 11.7M parameters
(2 cores) a step took 8.5 ms against PyTorch's foreach kernels' 5.1 ms; the loop, on the calling thread,
5.6-6.1 ms in a compiled training step.

The loop runs on numba's threads when numpy's BLAS shares them (`fxkit.runtime.blas_threads`): ResNet-18's
compiled training step (batch 8, 64x64) took 72.2 ms against 76.2 on the calling thread alone. Without
that sharing it stays on the calling thread: right after backward numba's threads waited for cores
OpenBLAS's spinning workers held, and the step grew by ~30 ms.

One loop per element does the same arithmetic in the same order, rounding after every operation as numpy
does (no fused multiply-add: numba compiles without fast-math contraction), so the result is bit for bit
the array form's, on any number of threads (no element depends on another).

`fxkit.optim.sgd` imports this module only for a parameter of `fxkit.optim.sgd.FUSED_MIN` elements or
more: numba takes ~0.5 s to import, which a small model's optimizer should not pay.
"""
import numba

from fxkit.runtime.blas_threads import share_blas_threads


def fused_sgd_update(p, g, buf, first, group):
    """Update ``p`` in place (and the momentum buffer ``buf``, unless ``first``, when it is written with the
    first step's direction) by `SGD`'s rule with ``group``'s hyperparameters. ``p``, ``g`` and ``buf`` are
    C-contiguous numpy arrays of one float dtype."""
    cast = p.dtype.type
    update = _parallel_update if _SHARED_POOL else _update
    update(p.reshape(-1), g.reshape(-1), buf.reshape(-1), first, cast(group["lr"]), cast(group["momentum"]),
           cast(1 - group["dampening"]), group["dampening"] != 0, cast(group["weight_decay"]),
           group["weight_decay"] != 0, group["nesterov"], group["maximize"])


@numba.njit(cache=True, nogil=True, inline="always")
def _element(p, g, buf, i, first, lr, momentum, keep, damped, decay, decayed, nesterov, maximize):
    d = -g[i] if maximize else g[i]
    if decayed:
        d = d + decay * p[i]
    if first:
        b = d
    else:
        b = buf[i] * momentum
        b = b + (d * keep if damped else d)
    buf[i] = b
    step = d + momentum * b if nesterov else b
    p[i] = p[i] - lr * step


@numba.njit(cache=True, nogil=True)
def _update(p, g, buf, first, lr, momentum, keep, damped, decay, decayed, nesterov, maximize):
    for i in range(p.size):
        _element(p, g, buf, i, first, lr, momentum, keep, damped, decay, decayed, nesterov, maximize)


@numba.njit(cache=True, nogil=True, parallel=True)
def _parallel_update(p, g, buf, first, lr, momentum, keep, damped, decay, decayed, nesterov, maximize):
    for i in numba.prange(p.size):
        _element(p, g, buf, i, first, lr, momentum, keep, damped, decay, decayed, nesterov, maximize)


_SHARED_POOL = bool(share_blas_threads())
