"""`Proxy`: the stand-in for a tensor (or any value) while a model is traced.

A proxy carries the graph node that will compute its value. It has the same
operator table and op methods as `Tensor` (installed from the registry), so
``x + y``, ``x.relu()``, ``F.relu(x)`` and ``fxkit.relu(x)`` all reach
`Op.__call__`, which hands the call to the tracer: one spelling per operation
in the graph. Whatever needs the value itself (``if``, ``len``, ``int``,
iteration, numpy) raises `TraceError` naming the user's line and the ways out.
"""
import dis
import sys
import weakref
from bisect import bisect_left

import numpy as np

from fxkit.errors import FxkitError, GraphError, TraceError, format_error
from fxkit.graph.node import Node, map_aggregate
from fxkit.graph.value import NodeValue
from fxkit.runtime import tensor_methods, tracing_hook
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.tracer.stack import user_location

WAYS_OUT = ("pass the deciding input as a constant with symbolic_trace(model, concrete_args={'name': value}), "
            "move this code into a function decorated with @fxkit.wrap (kept as one call node), "
            "or make the module doing it a leaf (subclass fxkit.Tracer and override is_leaf_module)")

# numpy ufuncs that ``ndarray <op> proxy`` arrives as, by the registry op they stand for.
_UFUNC_OPS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "div",
              np.floor_divide: "floor_divide", np.remainder: "remainder", np.power: "pow",
              np.matmul: "matmul", np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or",
              np.bitwise_xor: "bitwise_xor", np.left_shift: "bitwise_left_shift",
              np.right_shift: "bitwise_right_shift", np.equal: "eq", np.not_equal: "ne", np.less: "lt",
              np.less_equal: "le", np.greater: "gt", np.greater_equal: "ge"}
_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floor_divide": "//", "remainder": "%",
            "pow": "**", "matmul": "@", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
            "bitwise_left_shift": "<<", "bitwise_right_shift": ">>"}
_OPERATOR_OPCODES = ("BINARY_OP", "COMPARE_OP")
_instructions = weakref.WeakKeyDictionary()  # code -> its instructions (generated code comes and goes)


def trace_error(message, hint=WAYS_OUT):
    """A `TraceError` in fxkit's layout, located at the user's current line."""
    return TraceError(format_error(f"symbolic tracing: {message}", where=user_location(2), hint=hint))


def _current_instruction(frame):
    """The bytecode instruction ``frame`` is executing (to tell unpacking from a loop)."""
    code = frame.f_code
    listing = _instructions.get(code)
    if listing is None:
        listing = _instructions[code] = list(dis.get_instructions(code))
    i = bisect_left(listing, frame.f_lasti, key=lambda ins: ins.offset)
    return listing[i] if i < len(listing) else None


class Proxy(NodeValue):
    """A traced value: the `Node` computing it and the `Tracer` recording it.

    Operators and op methods come from `NodeValue`; this class adds what
    tracing a user's code needs (shape queries, in-place rebinding, errors).

    ``Proxy(node)`` without a tracer is torch.fx's "graph editing with proxies":
    operations on it record into ``node.graph`` at its insertion point, outside
    any trace.

    Example:
        >>> def f(x):
        ...     return (x + 1).relu()       # x is a Proxy while tracing
        >>> print(fxkit.symbolic_trace(f).graph)
        >>> with graph.inserting_after(relu):      # editing an existing graph
        ...     y = (Proxy(relu) * 2).node         # call[mul](%relu, 2)
    """

    __slots__ = ()

    def __init__(self, node, tracer=None):
        if not isinstance(node, Node):
            raise TraceError(format_error(
                f"Proxy(node): expected a graph Node, got {type(node).__name__} {node!r:.60}",
                hint="make proxies of nodes of the graph you edit: fxkit.graph.map_arg(node.args, Proxy)"))
        if tracer is None:
            if node._erased:
                raise GraphError(f"Proxy(%{node.name}): the node was erased from its graph; make the proxy of "
                                 f"a live node")
            tracer = GraphAppendingTracer(node.graph)
        super().__init__(node, tracer)

    def __repr__(self):
        return f"Proxy({self.node.name})"

    # -- attributes recorded as nodes --------------------------------------------------
    @property
    def shape(self):
        """``x.shape`` records ``call[size](x)``; indexing and arithmetic on it record too."""
        return get_op("size")(self)

    @property
    def ndim(self):
        """``x.ndim`` records ``call[dim](x)``."""
        return get_op("dim")(self)

    @property
    def dtype(self):
        """``x.dtype`` records ``call[builtins.getattr](x, 'dtype')``."""
        return self.tracer.create_proxy("call", getattr, (self, "dtype"), {})

    @property
    def device(self):
        """``x.device`` records ``call[builtins.getattr](x, 'device')``."""
        return self.tracer.create_proxy("call", getattr, (self, "device"), {})

    def cpu(self):
        """``x.cpu()`` records ``call[to](x, 'cpu')``."""
        return get_op("to")(self, "cpu")

    def cuda(self, device=None):
        """``x.cuda()`` records ``call[to](x, 'cuda')`` (``'cuda:N'`` for a device number)."""
        return get_op("to")(self, f"cuda:{device}" if isinstance(device, int) else (device or "cuda"))

    def __getattr__(self, name):
        # NOTE: reached only for names the class lacks; dunder and private probes
        # (copy, pickle, numpy's __array_interface__) must fail as plain attributes.
        if name.startswith("_"):
            raise AttributeError(name)
        if name.endswith("_") and hasattr(Tensor, name):
            return self._inplace_of(name)
        attr = getattr(Tensor, name, None)
        if callable(attr):
            raise trace_error(f"x.{name}() of traced value {self.node!r} is no fxkit op and needs a "
                              f"concrete tensor, which does not exist while tracing")
        # Tensor properties, and fields of an op's namedtuple output (``x.max(1).values``).
        return self.tracer.create_proxy("call", getattr, (self, name), {})

    # -- in-place: rebind this proxy to the new node ------------------------------------
    def _rebind(self, op, args, kwargs, spelling):
        """Record ``op`` and point this proxy (and every name bound to it) at the result,
        as the eager in-place op changes the tensor every name refers to."""
        if self.node.op == "get_attr":
            raise trace_error(
                f"in-place mutation of a module attribute: `{spelling}` on {self.node.target!r}; "
                f"a traced graph cannot change its module's state",
                hint="compute a new value instead (`y = self.buf + x`), or make the module a leaf "
                     "(subclass fxkit.Tracer and override is_leaf_module) or wrap the update with @fxkit.wrap")
        self.node = op(self, *args, **kwargs).node
        return self

    def _inplace_of(self, name):
        try:
            op = get_op(name[:-1])
        except FxkitError:
            raise trace_error(f"x.{name}() of traced value {self.node!r} is an in-place method with no "
                              f"fxkit op behind it; write the out-of-place computation instead") from None

        def method(*args, **kwargs):
            return self._rebind(op, args, kwargs, f"x.{name}(...)")
        return method

    def __setitem__(self, index, value):
        if self.node.op == "get_attr":
            raise trace_error(
                f"in-place mutation of a module attribute: `x[...] = value` on {self.node.target!r}",
                hint="compute a new tensor instead, or make the module a leaf (override Tracer.is_leaf_module)")
        get_op("setitem")(self, index, value)

    # -- values tracing cannot know -----------------------------------------------------
    def __bool__(self):
        raise trace_error(f"the truth value of traced value {self.node!r} is not known while tracing "
                          f"(an `if`, `while`, `and`/`or`/`not` or `assert` on a tensor)")

    def __len__(self):
        raise trace_error(f"len() of traced value {self.node!r} is not known while tracing")

    def __iter__(self):
        frame = sys._getframe(1)
        ins = _current_instruction(frame)
        if ins is not None and ins.opname == "UNPACK_SEQUENCE":
            # ``a, b = x.chunk(2)``: the count is in the bytecode, no value is needed.
            return iter([self[i] for i in range(ins.argval)])
        raise trace_error(f"iterating over traced value {self.node!r} (a `for` loop, `list(x)`, `*x`) "
                          f"needs its length, which is not known while tracing")

    def __contains__(self, item):
        raise trace_error(f"`in` on traced value {self.node!r} needs its values, which are not known while tracing")

    def _concrete(self, kind):
        raise trace_error(f"{kind}() of traced value {self.node!r} needs its concrete value, "
                          f"which is not known while tracing")

    def __int__(self):
        self._concrete("int")

    def __float__(self):
        self._concrete("float")

    def __complex__(self):
        self._concrete("complex")

    def __index__(self):
        self._concrete("index (a Python int for range, slicing a list, ...)")

    def item(self):
        """Refused: a Python number needs the value (`TraceError` with the ways out)."""
        self._concrete("item")

    def tolist(self):
        """Refused: a list needs the values (`TraceError` with the ways out)."""
        self._concrete("tolist")

    def numpy(self):
        """Refused: an array needs the data (`TraceError` with the ways out)."""
        self._concrete("numpy")

    def __call__(self, *args, **kwargs):
        raise trace_error(f"calling traced value {self.node!r}: only fxkit ops, wrapped functions and "
                          f"modules can be called on traced values")

    # -- numpy ----------------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise trace_error(f"numpy needs the data of traced value {self.node!r}, which does not exist "
                          f"while tracing; use fxkit ops instead of numpy")

    def __array_function__(self, func, types, args, kwargs):
        raise trace_error(f"numpy function np.{func.__name__} received traced value {self.node!r}; "
                          f"use the fxkit op of the same name instead of numpy")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = _UFUNC_OPS.get(ufunc)
        if name is not None and method == "__call__" and not kwargs:
            # ``ndarray + proxy`` arrives here; record it as the operator it is.
            ins = _current_instruction(sys._getframe(1))
            if ins is not None and ins.opname in _OPERATOR_OPCODES:
                return get_op(name)(*inputs)
        raise trace_error(f"numpy function np.{ufunc.__name__} received traced value {self.node!r}; "
                          f"use the fxkit op of the same name instead of numpy")


class GraphAppendingTracer:
    """The recorder of proxies made from existing nodes: appends to one graph, traces nothing.

    Args:
        graph: the graph new nodes go into (at its current insertion point).
    """

    def __init__(self, graph):
        self.graph = graph
        # NOTE: while one lives (its proxies keep it alive), Op.run looks for proxies in its arguments.
        tracing_hook.EDITING[0] += 1
        weakref.finalize(self, _stop_editing)

    def record_op(self, op, args, kwargs):
        """An `Op` was called on such a proxy: add ``call[op]`` to the graph."""
        return self.create_proxy("call", op, args, kwargs)

    def create_proxy(self, op, target, args, kwargs, name=None):
        """Add a node reading ``args``/``kwargs`` (proxies become their nodes); its proxy."""
        node = self.graph.create_node(op, target, self.create_arg(args), self.create_arg(kwargs), name)
        return Proxy(node, self)

    def create_arg(self, value):
        """``value`` with proxies replaced by their nodes; refuses nodes of other graphs and tensors."""
        def node_of(v):
            if isinstance(v, NodeValue):
                if v.node.graph is not self.graph:
                    raise GraphError(
                        f"graph editing with proxies: %{v.node.name} belongs to another graph than the one "
                        f"being edited; copy it in with graph.node_copy(node) and make the proxy of the copy")
                if v.node._erased:
                    raise GraphError(f"graph editing with proxies: %{v.node.name} was erased; use a live node")
                return v.node
            if isinstance(v, Tensor):
                raise GraphError(
                    "graph editing with proxies: a tensor constant cannot be added to a graph outside a trace "
                    "(it would need an attribute of the module); register it with gm.register_buffer(name, t) "
                    "and read it with Proxy(graph.get_attr(name))")
            return v
        return map_aggregate(value, node_of)


def _stop_editing():
    tracing_hook.EDITING[0] -= 1


def _install():
    # NOTE: the operator table and op methods are inherited from NodeValue; only the
    # in-place operators differ (a proxy rebinds where a tensor writes).
    for dunder, name in tensor_methods.INPLACE_OPERATORS.items():
        op = get_op(name)
        spelling = f"x {_SYMBOLS[name]}= ..."

        def method(self, other, _op=op, _spelling=spelling):
            return self._rebind(_op, (other,), {}, _spelling)
        setattr(Proxy, dunder, method)


_install()
