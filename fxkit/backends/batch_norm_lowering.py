"""How the numba backend runs training-mode ``batch_norm`` and ``batch_norm_training_backward``.

A training graph's batch norms read the numba backend's conv results, whose
memory is channels-last or channel-major (`fxkit.backends.conv_lowering`).
The eager ops reshape such an input to ``(N, C, pixels)``, a copy of the
whole activation (the backward copies its gradient too), then take about ten
numpy passes; in ResNet-18's batch-8 training step at 64x64 they took
5.7 ms forward and 15.7 ms backward. These calls run
`fxkit.backends.numba_batch_norm`'s three-pass kernels over the memory as it
lies, channels innermost (rows) or each channel's plane contiguous (planes),
and return results in the input's layout. An input in no such layout, other
dtypes, evaluation mode and non-constant options keep the eager op; each
choice is a `Decision` that ``explain()`` prints.
"""
import math
import numbers

import numpy as np

from fxkit.backends.bound_arguments import bound_metas
from fxkit.backends.conv_lowering import take
from fxkit.backends.cost_model import Decision
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.norm_ops import update_running_statistics
from fxkit.runtime.registry import get_op

_FLOATS = ("float32", "float64")


def memory_order(x):
    """``(order, kind)``: the axis order in which ``x`` (N, C, *) is C-contiguous (``x.transpose(order)``)
    and its kernel view's kind, ``"rows"`` (channels innermost) or ``"planes"`` (NCHW, or channel-major
    ``(C, N, *)``); ``(None, None)`` for any other layout."""
    nd = x.ndim
    for order, kind in (((0,) + tuple(range(2, nd)) + (1,), "rows"), (tuple(range(nd)), "planes"),
                        ((1, 0) + tuple(range(2, nd)), "planes")):
        if x.transpose(order).flags.c_contiguous:
            return order, kind
    return None, None


def kernel_view(memory, order, kind, channels):
    """A C-contiguous ``memory`` (``x.transpose(order)``) as the kernels read it: ``(R, C)`` rows, or
    ``(B, C, P)`` planes (``B`` the batch for NCHW, 1 for channel-major)."""
    if kind == "rows":
        return memory.reshape(-1, channels)
    batch = memory.shape[0] if order[0] == 0 else 1
    return memory.reshape(batch, channels, -1)


class _InLayout:
    """Base of the calls: results in their input's memory order, buffers kept per order."""

    __slots__ = ("__name__", "op", "dtype", "_pools")

    def __init__(self, name, op, dtype):
        from fxkit.backends import numba_batch_norm  # NOTE: numba loads only when a batch norm is lowered

        self.__name__, self.op, self.dtype = name, op, dtype
        self._pools = {}
        numba_batch_norm.warm(dtype)

    def _output(self, shape, order):
        """A buffer of ``shape`` laid out in ``order``: ``(memory, result view)``."""
        memory = take(self._pools.setdefault(order, []), tuple(shape[i] for i in order), self.dtype)
        return memory, memory.transpose(np.argsort(order))

    def __repr__(self):
        return f"<{type(self).__name__} {self.__name__}>"


class BatchNormTraining(_InLayout):
    """``batch_norm(..., training=True)``: the batch's statistics normalise, the running ones are updated."""

    __slots__ = ()

    def __call__(self, input, running_mean, running_var, weight=None, bias=None, training=False,  # noqa: A002
                 momentum=0.1, eps=1e-5):
        from fxkit.backends import numba_batch_norm

        order, kind = memory_order(input)
        if order is None:
            return self.op.impl(np, input, running_mean, running_var, weight, bias, training, momentum, eps)
        c = input.shape[1]
        memory, out = self._output(input.shape, order)
        mean, var = np.empty(c), np.empty(c)
        kernel = numba_batch_norm.rows_forward if kind == "rows" else numba_batch_norm.planes_forward
        kernel(kernel_view(memory, order, kind, c), kernel_view(input.transpose(order), order, kind, c),
               np.ones(c, self.dtype) if weight is None else weight,
               np.zeros(c, self.dtype) if bias is None else bias, float(eps), mean, var)
        update_running_statistics(running_mean, running_var, mean, var, momentum, input.size // c)
        return out


class BatchNormBackward(_InLayout):
    """``batch_norm_training_backward``: ``(grad_input, grad_weight, grad_bias)``, ``grad_input`` in the
    input's layout (a gradient in another layout is copied into it first)."""

    __slots__ = ()

    def __call__(self, grad_output, input, weight=None, eps=1e-5):  # noqa: A002
        from fxkit.backends import numba_batch_norm

        order, kind = memory_order(input)
        if order is None:
            return self.op.impl(np, grad_output, input, weight, eps)
        c = input.shape[1]
        memory, grad_input = self._output(input.shape, order)
        g = np.ascontiguousarray(grad_output.transpose(order))
        grad_weight, grad_bias = np.empty(c, self.dtype), np.empty(c, self.dtype)
        kernel = numba_batch_norm.rows_backward if kind == "rows" else numba_batch_norm.planes_backward
        kernel(kernel_view(memory, order, kind, c), kernel_view(g, order, kind, c),
               kernel_view(input.transpose(order), order, kind, c),
               np.ones(c, self.dtype) if weight is None else weight, float(eps), grad_weight, grad_bias)
        return grad_input, grad_weight, grad_bias


def _bound(node):
    """`bound_metas` of ``node``, or None when its arguments do not bind (the eager op reports that)."""
    try:
        return bound_metas(node)
    except TypeError:
        return None


def _usable(x, vectors, numbers_):
    """Why the kernels cannot run these operands, or None."""
    if not isinstance(x, TensorMeta) or x.dtype.name not in _FLOATS or len(x.shape) < 2 or \
            not all(isinstance(d, int) for d in x.shape):
        return "not a float32/float64 input of rank >= 2 with known sizes"
    if any(v is not None and (not isinstance(v, TensorMeta) or v.dtype is not x.dtype) for v in vectors):
        return "a per-channel vector of another dtype, or unknown"
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in numbers_):
        return "momentum or eps not a constant number"
    if math.prod(x.shape) // x.shape[1] <= 1:
        return "one value per channel"
    return None


def lower_batch_norm(node):
    """``(call or None, Decision)`` for a ``batch_norm`` node: training mode only."""
    eager = "numpy batch_norm"
    bound = _bound(node)
    if bound is None:
        return None, Decision(node.name, eager, "arguments do not bind to the op's signature")
    if bound.get("training", False) is not True:
        return None, Decision(node.name, eager, "evaluation mode (an affine map; fold_conv_bn removes most)")
    x = bound["input"]
    why = _usable(x, [bound.get(k) for k in ("running_mean", "running_var", "weight", "bias")],
                  [bound.get("momentum", 0.1), bound.get("eps", 1e-5)])
    if why is not None:
        return None, Decision(node.name, eager, why)
    return BatchNormTraining(f"{node.name}_training", node.target, x.dtype.np), Decision(
        node.name, "batch norm training, numba", "statistics and the affine map in three passes over the input "
                                                 "as it lies, channels-last or planar")


def lower_batch_norm_backward(node):
    """``(call or None, Decision)`` for a ``batch_norm_training_backward`` node."""
    eager = "numpy batch_norm_training_backward"
    bound = _bound(node)
    if bound is None:
        return None, Decision(node.name, eager, "arguments do not bind to the op's signature")
    x = bound["input"]
    why = _usable(x, [bound.get("grad_output"), bound.get("weight")], [bound.get("eps", 1e-5)])
    if why is not None:
        return None, Decision(node.name, eager, why)
    return BatchNormBackward(f"{node.name}_kernel", node.target, x.dtype.np), Decision(
        node.name, "batch norm backward, numba", "three passes over the input and gradient in the input's "
                                                 "layout, no reshaping copies")


BATCH_NORM_RULES = {get_op("batch_norm"): lower_batch_norm,
                    get_op("batch_norm_training_backward"): lower_batch_norm_backward}
"""Registry op -> ``rule(node) -> (call or None, Decision)``; results lie in their input's memory order."""
