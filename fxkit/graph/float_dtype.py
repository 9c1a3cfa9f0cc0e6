"""A graph's floating dtype constants follow a `GraphModule`'s ``.double()`` / ``.to(dtype)``.

A graph captured from a model bakes in the dtype it was captured at wherever
the model wrote ``dtype=x.dtype`` (T5's ``torch.zeros(..., dtype=scores.dtype)``
attention bias, ``x.to(query.dtype)``): torch.export records the dtype, not
where it came from. Casting only the parameters would leave those nodes
making float32 tensors inside a float64 model. So a cast of a GraphModule's
floating tensors from dtype A to B also turns every ``A`` among its nodes'
arguments (and recorded ``TensorMeta``) into ``B``: the graph computes as if it
had been captured at ``B``. A deliberate upcast to a dtype other than A
(``x.float()`` in a float16 model) is left alone.
"""
from fxkit.graph.node import map_aggregate
from fxkit.runtime.dtypes import DType

_META_KEYS = ("tensor_meta",)


def module_float_dtype(gm):
    """The dtype of ``gm``'s first floating point parameter or buffer, or None when it has none."""
    for _, tensor in (*gm.named_parameters(), *gm.named_buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def retarget_float_dtype(graph, old, new):
    """Replace the dtype ``old`` by ``new`` in every node's arguments and ``meta["tensor_meta"]``."""
    if old is None or new is None or old == new:
        return

    swapped = []

    def swap(value):
        if isinstance(value, DType) and value == old:
            swapped.append(value)
            return new
        return value

    for node in graph.nodes:
        del swapped[:]
        args, kwargs = map_aggregate(node.args, swap), map_aggregate(node.kwargs, swap)
        if swapped:
            node.args, node.kwargs = args, kwargs
        for key in _META_KEYS:
            if key in node.meta:
                node.meta[key] = map_aggregate(node.meta[key], swap)
