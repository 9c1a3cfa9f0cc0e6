"""`NodeValue`: a stand-in for the value of a node while a graph is being recorded.

Both the tracer's `Proxy` and the `Transformer`'s `Value` are such stand-ins:
they carry the node computing the value and the recorder (``tracer``) that
adds nodes. The class gets `Tensor`'s operator table and op methods from the
registry, so ``v + 1``, ``v.relu()`` and ``fxkit.relu(v)`` all reach
`Op.__call__`, which hands the call to ``tracer.record_op(op, args, kwargs)``
(the runtime's dispatch hook; the runtime never imports this layer).
"""
from fxkit.runtime.tensor_methods import install_methods, install_operators, install_transposes
from fxkit.runtime.tracing_hook import ProxyBase


class NodeValue(ProxyBase):
    """The value of ``node``, recorded by ``tracer`` (an object with ``record_op``).

    Attributes:
        node: the `Node` computing the value.
        tracer: what records operations applied to the value.
    """

    __slots__ = ("node", "tracer")
    __hash__ = object.__hash__

    def __init__(self, node, tracer):
        self.node = node
        self.tracer = tracer

    def __repr__(self):
        return f"{type(self).__name__}({self.node!r})"


install_operators(NodeValue)
install_methods(NodeValue)
install_transposes(NodeValue)
