"""`ShapeProp`: record every node's shape, dtype and device by running the graph.

The metadata convention shared with `infer_shapes` (which computes the same
entries from the registry's shape rules without running anything):

* ``node.meta["tensor_meta"]``: the node's output with every tensor replaced
  by its `TensorMeta` (shape, dtype, device), in the same structure
  (a `TensorMeta`; a tuple, list, namedtuple or dict of them; Python values
  such as the ints of ``x.shape`` stay as they are). Set only when the output
  holds at least one tensor.
* ``node.meta["shape"]``, ``["dtype"]``, ``["device"]``: for a tensor output,
  its shape tuple, `DType` and `Device`; for a flat tuple/list of tensors
  (``chunk``, ``max(dim=...)``), tuples with one entry per tensor. Absent for
  anything else.

``print(gm.graph)`` shows these entries as ``f32[8, 3, 32, 32]``.

Example:
    >>> ShapeProp(gm).propagate(fxkit.randn(8, 3, 32, 32))
    >>> print(gm.graph)
    graph(x):
        %x     : f32[8, 3, 32, 32] = placeholder[x]
        %conv1 : f32[8, 6, 28, 28] = call[conv1](%x)
        ...
"""
from fxkit.graph import Interpreter
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.tensor import Tensor

_KEYS = ("shape", "dtype", "device")


def meta_of(value):
    """``value`` with each `Tensor` replaced by its `TensorMeta` (containers kept)."""
    if isinstance(value, Tensor):
        return TensorMeta(tuple(value.shape), value.dtype, value.device)
    if isinstance(value, tuple):
        items = [meta_of(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [meta_of(v) for v in value]
    if isinstance(value, dict):
        return {k: meta_of(v) for k, v in value.items()}
    return value


def has_tensor(meta):
    """Whether a meta structure holds at least one `TensorMeta`."""
    if isinstance(meta, TensorMeta):
        return True
    if isinstance(meta, (tuple, list)):
        return any(has_tensor(m) for m in meta)
    if isinstance(meta, dict):
        return any(has_tensor(m) for m in meta.values())
    return False


def record_meta(node, meta):
    """Store a meta structure on ``node`` following the module's convention."""
    for key in _KEYS + ("tensor_meta",):
        node.meta.pop(key, None)
    if not has_tensor(meta):
        return
    node.meta["tensor_meta"] = meta
    if isinstance(meta, TensorMeta):
        node.meta["shape"], node.meta["dtype"], node.meta["device"] = meta.shape, meta.dtype, meta.device
    elif isinstance(meta, (tuple, list)) and meta and all(isinstance(m, TensorMeta) for m in meta):
        for i, key in enumerate(_KEYS):
            node.meta[key] = tuple(m[i] for m in meta)


class ShapeProp(Interpreter):
    """Runs a `GraphModule` and records each node's shape, dtype and device in ``node.meta``.

    Args:
        gm: the module whose graph is annotated in place.
    """

    def run_node(self, n):
        result = super().run_node(n)
        record_meta(n, meta_of(result))
        return result

    def propagate(self, *args):
        """Run the graph on ``args`` (one per placeholder), annotating every node.

        Returns:
            The graph's output.
        """
        return self.run(*args)
