"""A PyTorch module with its own ``forward``, traced with ``torch.fx`` and rebuilt in fxkit.

``torch.fx`` records the forward; each of its nodes becomes fxkit graph nodes
through three tables: torch functions (``F.relu``, ``torch.flatten``,
``operator.add``) and Tensor method names (``view``, ``flatten``) map to
registry ops, and layer calls become calls of the converted `fxkit.nn` layer
(`torch_layers.layer_table`) or, for torch layers fxkit has no class for
(``nn.LSTMCell``), registry ops emitted in their place (``MODULE_EMITTERS``).
Standard layers stay leaves even when a subclass calls ``super().forward``
(the zoo's ``LSTMCell`` twin does): their ``forward`` is recorded as one layer
call while tracing.

torch is passed in by `fxkit.interop.torch_import`; this module never imports it.
"""
import builtins
import functools
import operator

from fxkit.errors import GraphError, TraceError
from fxkit.graph import Graph, GraphModule
from fxkit.interop.torch_layers import convert_layer, layer_table, to_numpy
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.op import Op
from fxkit.runtime.registry import all_ops, get_op
from fxkit.runtime.tensor import Tensor

_OPERATORS = {operator.add: "add", operator.iadd: "add", operator.sub: "sub", operator.isub: "sub",
              operator.mul: "mul", operator.imul: "mul", operator.truediv: "div", operator.itruediv: "div",
              operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "pow",
              operator.matmul: "matmul", operator.neg: "neg", operator.getitem: "getitem", operator.eq: "eq",
              operator.ne: "ne", operator.lt: "lt", operator.le: "le", operator.gt: "gt", operator.ge: "ge",
              operator.and_: "bitwise_and", operator.or_: "bitwise_or", operator.xor: "bitwise_xor",
              operator.invert: "bitwise_not"}
_ATTRIBUTES = {"shape": "size", "ndim": "dim", "T": "numpy_T"}
_IGNORED_KWARGS = {"_stacklevel"}


@functools.cache
def function_table(torch):
    """``{torch function or operator: registry Op}``: every op with a same-named torch or
    ``torch.nn.functional`` function (fxkit ops follow PyTorch's signatures), plus operators."""
    table = {}
    for op in all_ops():
        for namespace in (torch, torch.nn.functional):
            fn = getattr(namespace, op.name, None)
            if callable(fn) and not isinstance(fn, type):
                table[fn] = op
    table.update({fn: get_op(name) for fn, name in _OPERATORS.items()})
    return table


@functools.cache
def method_table():
    """``{Tensor method name: registry Op}`` (the methods the registry installs)."""
    return {op.method: op for op in all_ops() if op.method}


def _lstm_cell(c, path, module, args, kwargs):
    """``nn.LSTMCell`` as registry ops (PyTorch's gate order: input, forget, cell, output)."""
    x = args[0]
    state = args[1] if len(args) > 1 else kwargs.get("hx")
    if state is None:
        raise GraphError("nn.LSTMCell called without (hx, cx): pass the states explicitly")
    hx, cx = state if isinstance(state, (tuple, list)) else (c.op("getitem", state, i) for i in (0, 1))
    weights = [c.param(path, name) for name in ("weight_ih", "bias_ih", "weight_hh", "bias_hh")]
    gates = c.op("add", c.op("linear", x, weights[0], weights[1]), c.op("linear", hx, weights[2], weights[3]))
    chunks = c.op("chunk", gates, 4, 1)
    activations = ("sigmoid", "sigmoid", "tanh", "sigmoid")
    i, f, g, o = (c.op(fn, c.op("getitem", chunks, k)) for k, fn in enumerate(activations))
    cy = c.op("add", c.op("mul", f, cx), c.op("mul", i, g))
    return c.op("mul", o, c.op("tanh", cy)), cy


@functools.cache
def module_emitters(torch):
    """``{torch layer class: emitter}`` for torch layers with no fxkit class."""
    return {torch.nn.LSTMCell: _lstm_cell}


def _find(table, cls):
    return next((table[k] for k in cls.__mro__ if k in table), None)


def convert_traced(torch, module):
    """``module`` traced by torch.fx and rebuilt as an fxkit `GraphModule`."""
    import torch.fx

    layers, emitters = layer_table(torch), module_emitters(torch)
    recorded = tuple(layers) + tuple(emitters)

    class _Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m, qualname):
            base = next((k for k in type(m).__mro__ if k in layers or k in emitters), None)
            if base is not None:
                return type(m).forward is base.forward
            return super().is_leaf_module(m, qualname)

    tracer = _Tracer()
    originals = {cls: cls.__dict__["forward"] for cls in recorded if "forward" in cls.__dict__}

    def recording(original):
        def forward(self, *args, **kwargs):
            if _has_proxy(torch, (args, kwargs)):
                return tracer.create_proxy("call_module", tracer.path_of_module(self), args, kwargs)
            return original(self, *args, **kwargs)
        return forward

    try:
        for cls, original in originals.items():
            cls.forward = recording(original)
        fx_graph = tracer.trace(module)
    except TraceError:
        raise
    except Exception as exc:  # noqa: BLE001  (torch.fx raises plain exceptions on untraceable code)
        raise TraceError(f"fxkit.from_torch: torch.fx could not trace {type(module).__name__}: "
                         f"{type(exc).__name__}: {exc}\n  hint: pass example_inputs to capture it with torch.export "
                         f"instead (fxkit.from_torch(model, example_inputs)), or write its forward without "
                         f"data-dependent Python control flow") from exc
    finally:
        for cls, original in originals.items():
            cls.forward = original
    return _Converter(torch, module, layers, emitters).run(fx_graph)


def _has_proxy(torch, value):
    found = []
    torch.fx.node.map_aggregate(value, lambda v: found.append(v) if isinstance(v, torch.fx.Proxy) else None)
    return bool(found)


class _Converter:
    """Rebuilds a torch.fx graph as an fxkit graph; emitters call `op` and `param`."""

    def __init__(self, torch, module, layers, emitters):
        self.torch = torch
        self.module = module
        self.layers = layers
        self.emitters = emitters
        self.graph = Graph()
        self.root = {}
        self.functions = function_table(torch)
        self.methods = method_table()

    def run(self, fx_graph):
        env = {}
        for n in fx_graph.nodes:
            try:
                env[n] = self._convert(n, env)
            except (GraphError, TraceError):
                raise
            except Exception as exc:  # noqa: BLE001  (named with the torch.fx node below)
                raise GraphError(f"fxkit.from_torch: cannot convert the torch.fx node {n.format_node()} of "
                                 f"{type(self.module).__name__}: {type(exc).__name__}: {exc}") from exc
        name = type(self.module).__name__
        gm = GraphModule(self.root, self.graph, class_name=name if name.isidentifier() else "GraphModule")
        return gm.train(self.module.training)

    def _convert(self, n, env):
        args = self._arg(n.args, env)
        kwargs = {k: v for k, v in self._arg(n.kwargs, env).items() if k not in _IGNORED_KWARGS}
        if n.op == "placeholder":
            return self.graph.placeholder(n.target, *args)
        if n.op == "output":
            return self.graph.output(args[0])
        if n.op == "get_attr":
            return self.param("", n.target)
        if n.op == "call_module":
            return self._call_module(n.target, args, kwargs)
        if n.op == "call_method":
            return self._call_method(n.target, args, kwargs)
        return self._call_function(n.target, args, kwargs)

    def _call_module(self, path, args, kwargs):
        sub = self.module.get_submodule(path)
        emitter = _find(self.emitters, type(sub))
        if emitter is not None:
            return emitter(self, path, sub, args, kwargs)
        spec = _find(self.layers, type(sub))
        if spec is None:
            raise GraphError(f"fxkit.from_torch: the layer {path!r} is a {type(sub).__module__}."
                             f"{type(sub).__qualname__}, which has no fxkit equivalent\n  hint: fxkit converts "
                             f"{', '.join(sorted(k.__name__ for k in self.layers))} and modules built from them")
        self.root[path] = convert_layer(sub, *spec)
        return self.graph.call(path, args, kwargs)

    def _call_method(self, name, args, kwargs):
        op = self.methods.get(name)
        if op is None:
            hint = (f"write x = x.{name[:-1]}(...) (in-place methods are not converted)" if name.endswith("_")
                    else "use an equivalent registry op")
            raise GraphError(f"fxkit.from_torch: the Tensor method {name!r} has no fxkit equivalent\n  hint: {hint}")
        return self.graph.call(op, args, kwargs)

    def _call_function(self, fn, args, kwargs):
        if fn is builtins.getattr:
            name = args[1]
            if name in _ATTRIBUTES:
                return self.graph.call(get_op(_ATTRIBUTES[name]), (args[0],))
            return self.graph.call(builtins.getattr, args)
        op = self.functions.get(fn)
        if op is None:
            raise GraphError(f"fxkit.from_torch: the function {getattr(fn, '__module__', '')}."
                             f"{getattr(fn, '__qualname__', fn)} has no fxkit equivalent")
        if op.name == "getitem" and isinstance(args[0], (tuple, list)) and type(args[1]) is int:
            return args[0][args[1]]  # an element of a layer's tuple of results
        if "input" in kwargs and not args:
            args = (kwargs.pop("input"),)
        return self.graph.call(op, args, kwargs)

    # -- helpers for emitters --------------------------------------------------------------
    def op(self, name, *args, **kwargs):
        """Record the registry op ``name``."""
        return self.graph.call(get_op(name), args, kwargs)

    def param(self, path, name):
        """``get_attr`` of the torch module's tensor ``path.name`` (converted once), or None."""
        qualname = f"{path}.{name}" if path else name
        if qualname not in self.root:
            value = self.module.get_submodule(path) if path else self.module
            for part in name.split("."):
                value = getattr(value, part)
            if value is None:
                return None
            if not isinstance(value, self.torch.Tensor):
                raise GraphError(f"fxkit.from_torch: {qualname!r} is a {type(value).__name__}, not a tensor")
            array = to_numpy(value, qualname)
            is_param = isinstance(value, self.torch.nn.Parameter)
            self.root[qualname] = Parameter(array, requires_grad=value.requires_grad) if is_param else Tensor(array)
        return self.graph.get_attr(qualname)

    def _arg(self, value, env):
        """torch.fx arguments as fxkit ones: nodes, dtypes, devices and sizes converted."""
        torch = self.torch
        if isinstance(value, torch.fx.Node):
            return env[value]
        if isinstance(value, tuple):
            items = [self._arg(v, env) for v in value]
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        if isinstance(value, list):
            return [self._arg(v, env) for v in value]
        if isinstance(value, dict):
            return {k: self._arg(v, env) for k, v in value.items()}
        if isinstance(value, slice):
            return slice(self._arg(value.start, env), self._arg(value.stop, env), self._arg(value.step, env))
        if isinstance(value, torch.dtype):
            return _dt.from_name(str(value).removeprefix("torch."))
        if isinstance(value, torch.device):
            return str(value)
        if isinstance(value, (torch.Tensor, Op)):
            raise GraphError(f"fxkit.from_torch: a {type(value).__name__} constant inside the graph arguments "
                             f"cannot be converted; register it as a buffer of the module")
        return value
