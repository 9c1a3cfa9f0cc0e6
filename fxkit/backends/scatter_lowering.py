"""How the numba backend runs ``scatter`` and ``scatter_add`` along the last dimension, and the max-pool backward.

A scatter whose index covers every leading position of its input
(``index.shape[:-1] == input.shape[:-1]``) and has its ``src``'s shape is a
row-by-row loop: each row of ``src`` written (or, ``scatter_add`` and
``reduce="add"``, added) at the positions its row of ``index`` names, by
`fxkit.runtime.ops.pool_loops.scatter_rows` (eager max pool's backward runs it too; numpy's
``add.at`` took 3.5 ms for ResNet-18's pool in a batch-8 step at 64x64). That is the shape of a
training graph's adaptive max-pool backward (`fxkit.transforms.grad`); any other scatter, one writing a
``value``, multiplying, or of other dtypes, keeps the eager op, a `Decision`
``explain()`` prints. ``max_pool2d_with_indices_backward`` (a training graph's max-pool
backward) runs the same loop into zeros: each gradient written where the pool's windows
cannot overlap, added where they can. An index out of range makes the call run the eager
op, which raises its error.
"""
import numpy as np

from fxkit.backends.bound_arguments import bound_metas
from fxkit.backends.conv_lowering import take
from fxkit.backends.cost_model import Decision
from fxkit.errors import FxkitError
from fxkit.runtime.autograd.backward_ops import pool_windows_overlap
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.indexing import along_layout
from fxkit.runtime.registry import get_op

_DTYPES = ("float32", "float64", "int32", "int64")


class ScatterRows:
    """A lowered ``scatter``/``scatter_add`` node: called like the op's impl without ``xp``."""

    __slots__ = ("__name__", "op", "add", "shape", "dtype", "_outputs", "_kernel")

    def __init__(self, name, op, add, out_meta):
        from fxkit.runtime.ops import pool_loops  # NOTE: numba loads only when a scatter is lowered

        self.__name__, self.op, self.add = name, op, add
        self.shape, self.dtype = tuple(out_meta.shape), out_meta.dtype.np
        self._outputs = []
        pool_loops.warm_scatter(self.dtype)
        self._kernel = pool_loops.scatter_rows

    def __call__(self, input, dim, index, src=None, **options):  # noqa: A002
        out = take(self._outputs, self.shape, self.dtype)
        np.copyto(out, input)
        length = self.shape[-1]
        rows = np.ascontiguousarray(index).reshape(-1, index.shape[-1])
        values = np.ascontiguousarray(src).reshape(rows.shape)
        if not self._kernel(out.reshape(-1, length), rows, values, self.add):
            return self.op.impl(np, input, dim, index, src, **options)  # NOTE: raises the index's error
        return out

    def __repr__(self):
        return f"<ScatterRows {self.__name__} -> {self.shape}>"


def _bound(node):
    """``(bound arguments, None)`` of ``node``, or ``(None, Decision)`` keeping the eager op when they do not bind."""
    try:
        return bound_metas(node), None
    except TypeError as exc:
        return None, Decision(node.name, f"numpy {node.target.name}", f"arguments do not bind: {exc}")


def lower_scatter(node):
    """``(call or None, Decision)`` for a ``scatter`` or ``scatter_add`` node."""
    op = node.target
    eager = f"numpy {op.name}"
    bound, refused = _bound(node)
    if refused is not None:
        return None, refused
    x, index, src, out = bound.get("input"), bound.get("index"), bound.get("src"), node.meta.get("tensor_meta")
    if not all(isinstance(m, TensorMeta) for m in (x, index, src, out)):
        return None, Decision(node.name, eager, "writes a value, or an operand's metadata is unknown")
    reduce = bound.get("reduce")
    if reduce not in (None, "add") or bound.get("value") is not None:
        return None, Decision(node.name, eager, f"reduce={reduce!r}")
    if x.dtype.name not in _DTYPES or src.dtype is not x.dtype or index.dtype.name != "int64" or not x.shape:
        return None, Decision(node.name, eager, f"{x.dtype.name} values, {index.dtype.name} index")
    dim = bound.get("dim")
    if not isinstance(dim, int) or along_layout(op.name, x.shape, dim, index, src.shape) != len(x.shape) - 1:
        return None, Decision(node.name, eager, f"along dimension {dim}, not the last")
    if tuple(index.shape[:-1]) != tuple(x.shape[:-1]) or tuple(src.shape) != tuple(index.shape):
        return None, Decision(node.name, eager, f"index {list(index.shape)} does not cover input "
                                                f"{list(x.shape)} with src {list(src.shape)}'s shape")
    add = op is _SCATTER_ADD or reduce == "add"
    call = ScatterRows(f"{node.name}_rows", op, add, out)
    return call, Decision(node.name, f"{op.name} rows, numba", f"along the last of {list(x.shape)}: each value "
                                                               f"{'added' if add else 'written'} once, in order")


class PoolBackwardRows:
    """A lowered ``max_pool2d_with_indices_backward`` node: zeros of the pooled input's shape with each
    gradient written (or, ``add``, added in order) at its index, plane by plane."""

    __slots__ = ("__name__", "op", "add", "shape", "dtype", "_outputs")

    def __init__(self, name, op, add, out_meta):
        from fxkit.runtime.ops import pool_loops  # NOTE: numba loads only when a pool's backward is lowered

        self.__name__, self.op, self.add = name, op, add
        self.shape, self.dtype = tuple(out_meta.shape), out_meta.dtype.np
        self._outputs = []
        pool_loops.warm_scatter(self.dtype)

    def __call__(self, grad_output, input_shape, kernel_size, stride, padding, dilation, ceil_mode, indices):
        from fxkit.runtime.ops.pool_loops import scatter_rows

        out = take(self._outputs, self.shape, self.dtype)
        out.fill(0)
        rows = out.reshape(-1, self.shape[-2] * self.shape[-1])
        index = np.ascontiguousarray(indices).reshape(len(rows), indices.shape[-2] * indices.shape[-1])
        if not scatter_rows(rows, index, np.ascontiguousarray(grad_output).reshape(index.shape), self.add):
            return self.op.impl(np, grad_output, input_shape, kernel_size, stride, padding, dilation, ceil_mode,
                                indices)  # NOTE: raises the index's error
        return out

    def __repr__(self):
        return f"<PoolBackwardRows {self.__name__} -> {self.shape}>"


def lower_pool_backward(node):
    """``(call or None, Decision)`` for a ``max_pool2d_with_indices_backward`` node."""
    op = node.target
    eager = f"numpy {op.name}"
    bound, refused = _bound(node)
    if refused is not None:
        return None, refused
    grad, index, out = bound.get("grad_output"), bound.get("indices"), node.meta.get("tensor_meta")
    if not all(isinstance(m, TensorMeta) for m in (grad, index, out)):
        return None, Decision(node.name, eager, "an operand's metadata is unknown")
    if grad.dtype.name not in _DTYPES[:2] or index.dtype.name != "int64" or out.dtype is not grad.dtype:
        return None, Decision(node.name, eager, f"{grad.dtype.name} gradient, {index.dtype.name} indices")
    try:
        add = pool_windows_overlap(bound.get("kernel_size"), bound.get("stride"), bound.get("dilation", 1))
    except FxkitError as exc:
        return None, Decision(node.name, eager, str(exc))
    call = PoolBackwardRows(f"{node.name}_rows", op, add, out)
    return call, Decision(node.name, "max pool backward rows, numba",
                          f"{'overlapping windows: each gradient added' if add else 'each gradient written'} "
                          f"at its index, in order")


_SCATTER_ADD = get_op("scatter_add")
SCATTER_RULES = {get_op("scatter"): lower_scatter, _SCATTER_ADD: lower_scatter,
                 get_op("max_pool2d_with_indices_backward"): lower_pool_backward}
"""Registry op -> ``rule(node) -> (call or None, Decision)``; results lie in their shape's order."""
