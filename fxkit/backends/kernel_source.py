"""Which generated kernel a fused call becomes: shared by the numba and cupy backends,
which differ only in the generators they pass."""
from fxkit.codegen.numba_reduction import row_node
from fxkit.errors import LoweringError


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
    if unsupported(args + list(outputs if type(outputs) is tuple else [outputs])) is not None:
        return None
    names = [a.name if hasattr(a, "name") else repr(a) for a in node.args]
    if row_node(fused.graph) is not None:
        try:
            return row_kernel(fused, args, names)
        except LoweringError:
            return None  # NOTE: the documented refusal of a layout row kernels do not take
    return elementwise_kernel(fused, args, names)
