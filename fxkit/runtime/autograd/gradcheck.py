"""Finite-difference gradient check: analytic against numeric directional derivatives.

For random directions ``v`` (in the inputs) and ``u`` (in the outputs), the
analytic ``<u, J v>`` comes from one backward pass (``grad`` with gradient
``u``, dotted with ``v``) and the numeric one from central differences
``<u, f(x + eps v) - f(x - eps v)> / 2 eps``. Each input that requires grad is
checked on its own, so a failure names it. Two forward passes per input and
direction, whatever the sizes: cheap enough to run over every op's test cases.
Run it in float64; float32 or half outputs (a cast) are compared with a larger
step and tolerance.
"""
import numpy as np

from fxkit.errors import AutogradError
from fxkit.runtime.autograd import engine
from fxkit.runtime.autograd.grad_mode import no_grad
from fxkit.runtime.device import cpu
from fxkit.runtime.tensor import Tensor

# per output dtype: (step, relative tolerance)
_STEPS = {np.dtype(np.float64): (1e-6, 1e-5), np.dtype(np.float32): (1e-2, 2e-3), np.dtype(np.float16): (1.0, 2e-2)}


def gradcheck(fn, inputs, *, directions=2, seed=0, reseed=None, eps=None, rtol=None, atol=1e-8):
    """Check the gradients of ``fn(*inputs)`` with respect to the inputs that require grad.

    Args:
        fn: a function of tensors returning a tensor or a tuple/list of them.
        inputs: the tensors (and other values) to call ``fn`` with.
        directions: how many random direction pairs to try.
        seed: seeds the directions.
        reseed: called before every evaluation of ``fn`` (``lambda: fxkit.manual_seed(0)``
            makes random ops such as dropout draw the same values each time).
        eps, rtol: the finite-difference step and relative tolerance (by default from the
            outputs' dtype: 1e-6 and 1e-5 for float64).
        atol: absolute tolerance.

    Returns:
        True; a mismatch raises `AutogradError` naming the input and both values.

    Example:
        >>> x = fxkit.randn(3, 4, dtype=fxkit.float64, requires_grad=True)
        >>> fxkit.autograd.gradcheck(lambda t: t.sigmoid() * t, [x])
        True
    """
    inputs = list(inputs)
    wrt = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not wrt:
        raise AutogradError("gradcheck: no input requires grad")
    rng = np.random.default_rng(seed)
    outputs = _float_outputs(_call(fn, inputs, reseed))
    if not outputs or not any(o.requires_grad for o in outputs):
        raise AutogradError("gradcheck: the function's outputs do not require grad (nothing was recorded)")
    step, tol = _STEPS.get(min((o._data.dtype for o in outputs), key=lambda d: d.itemsize), (1e-6, 1e-5))
    step, tol = eps or step, rtol or tol
    for _ in range(directions):
        us = [_like(o, rng) for o in outputs]
        recorded = [(o, u) for o, u in zip(outputs, us) if o.requires_grad]
        grads = engine.grad([o for o, _ in recorded], [inputs[i] for i in wrt], [u for _, u in recorded],
                            retain_graph=True, allow_unused=True)
        for i, g in zip(wrt, grads):
            x = inputs[i]
            if g is not None and (g.shape != x.shape or g.dtype is not x.dtype):
                raise AutogradError(f"gradcheck: input {i}: gradient of shape {list(g.shape)} and dtype "
                                    f"{g.dtype.name} for an input of shape {list(x.shape)} and dtype {x.dtype.name}")
            v = _like(x, rng)
            terms = 0.0 if g is None else g._host().astype(np.float64) * v._host()
            analytic = float(np.sum(terms))
            scale = float(np.sum(np.abs(terms)))
            numeric = _numeric(fn, inputs, i, v, us, step, reseed)
            if not abs(analytic - numeric) <= atol + tol * max(scale, abs(analytic), abs(numeric)):
                raise AutogradError(f"gradcheck: input {i} (shape {list(x.shape)}): analytic directional derivative "
                                    f"{analytic:.8g} != numeric {numeric:.8g} (difference "
                                    f"{abs(analytic - numeric):.3g}, step {step:g})")
    return True


def _call(fn, inputs, reseed):
    if reseed is not None:
        reseed()
    return fn(*inputs)


def _float_outputs(out):
    items = [out] if isinstance(out, Tensor) else list(out) if isinstance(out, (tuple, list)) else []
    return [o for o in items if isinstance(o, Tensor) and o._data.dtype.kind == "f"]


def _like(t, rng):
    """A random direction of ``t``'s shape, dtype and device."""
    out = Tensor._make(rng.standard_normal(t.shape).astype(t._data.dtype), cpu)
    return out if t.device is cpu else out.to(t.device)


def _numeric(fn, inputs, i, v, us, step, reseed):
    """``<u, f(x_i + step v) - f(x_i - step v)> / 2 step``, in float64."""
    x = inputs[i]
    totals = []
    with no_grad():
        for sign in (1, -1):
            moved = list(inputs)
            moved[i] = Tensor._make(x._data + (sign * step) * v._data.astype(x._data.dtype), x.device)
            outs = _float_outputs(_call(fn, moved, reseed))
            totals.append(sum(float(np.sum(o._host().astype(np.float64) * u._host())) for o, u in zip(outs, us)))
    return (totals[0] - totals[1]) / (2 * step)
