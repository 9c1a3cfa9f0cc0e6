"""Which generated kernel a fused call becomes: shared by the numba and cupy backends,
which differ only in the generators they pass."""
import math

from fxkit.codegen.numba_reduction import row_node
from fxkit.errors import LoweringError
from fxkit.runtime.meta import TensorMeta, broadcast_shapes


def fused_kernel_source(node, unsupported, row_kernel, elementwise_kernel):
    """The generated kernel of a fused call, or None when its group runs with array ops instead.

    Args:
        node: a ``call`` of a `FusedOp` whose inputs' ``meta["tensor_meta"]`` is filled.
        unsupported: ``unsupported(metas)`` -> a reason the generator cannot take these dtypes, or None.
        row_kernel: ``row_kernel(fused, metas, names)`` for groups with a trailing row reduction.
        elementwise_kernel: ``elementwise_kernel(fused, metas, names)`` for the others.
    """
    fused = node.target
    args = [a.meta.get("tensor_meta") if hasattr(a, "meta") else a for a in node.args]
    outputs = fused.shape_rule(*args)
    outputs = list(outputs if type(outputs) is tuple else [outputs])
    if unsupported(args + outputs) is not None or _writes_nothing(args, outputs):
        return None
    names = [a.name if hasattr(a, "name") else repr(a) for a in node.args]
    if row_node(fused.graph) is not None:
        try:
            return row_kernel(fused, args, names)
        except LoweringError:
            return None  # NOTE: the documented refusal of a layout row kernels do not take
    return elementwise_kernel(fused, args, names)


def _writes_nothing(args, outputs):
    """Whether the kernel's loops would be empty while an output has elements.

    A group's loops run over the broadcast of all its shapes, and an output of
    a smaller shape (``-x`` of a scalar beside ``x + y`` over a ``(3, 0)``
    tensor) is written from inside them: with no iterations it is never
    written. Such a group runs with array ops instead.
    """
    shapes = [m.shape for m in args + outputs if isinstance(m, TensorMeta)]
    return math.prod(broadcast_shapes(*shapes)) == 0 and any(math.prod(m.shape) for m in outputs)
