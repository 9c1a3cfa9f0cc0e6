"""`Tracer` and `symbolic_trace`: run a model on proxies and record a `Graph`.

The tracer calls ``forward`` with one `Proxy` a graph input. Ops reach it
through the runtime's dispatch hook (`Op.__call__` hands any call with a
proxy to `Tracer.record_op`); modules reach it through ``Module.__call__``,
``__getattr__`` and ``__setattr__``, which are patched for the duration of
the trace only (restored in ``finally``): leaf modules become one ``call``
node each, parameters and buffers become ``get_attr`` nodes, and assigning
to a module attribute is refused.

Example:
    >>> gm = fxkit.symbolic_trace(model)
    >>> print(gm.graph)
    >>> gm(x)        # equals model(x)
"""
import copy
import dataclasses
import inspect
import math

import numpy as np

from fxkit.errors import TraceError
from fxkit.graph import Graph, GraphModule
from fxkit.runtime import nn
from fxkit.runtime.dtypes import DType
from fxkit.runtime.device import Device
from fxkit.runtime.op import Op
from fxkit.runtime.tensor import Tensor
from fxkit.runtime.tracing_hook import ACTIVE, ProxyBase, find_proxy
from fxkit.tracer.patching import patched
from fxkit.tracer.autowrap import autowrap_table
from fxkit.tracer.proxy import Proxy, trace_error
from fxkit.tracer.specialize import check_specialized, guardable
from fxkit.tracer.stack import user_location
from fxkit.tracer.variadic import flatten_variadic

_ATOMS = (int, float, bool, str, type(None), complex, type(Ellipsis), DType, Device, Op)
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_BUILTIN_PREFIXES = ("fxkit.runtime.nn", "fxkit.nn")
# NOTE: what Tracer.__deepcopy__ shares: modules cannot be copied, and globals must not be.
_SHARED_ON_COPY = frozenset({"_autowrap_modules", "_autowrap_table", "_fn_globals"})


class Tracer:
    """Records a model's forward as a `Graph`; subclass to change what is traced.

    Override `is_leaf_module` to keep more (or fewer) modules as single
    ``call`` nodes, or `create_proxy` / `create_node` to annotate nodes.

    Example:
        >>> class KeepBlocks(fxkit.Tracer):
        ...     def is_leaf_module(self, module, qualname):
        ...         return isinstance(module, Block) or super().is_leaf_module(module, qualname)
        >>> graph = KeepBlocks().trace(model)
    """

    guard_concrete_args = True
    """Whether ``concrete_args`` get a `check_specialized` guard node (tracers of bodies that
    are analysed but never run turn it off)."""

    traced_func_name = "forward"
    """The method of a root module that is traced (torch.fx's attribute of the same name)."""

    def __init__(self, autowrap_modules=(math,), autowrap_functions=()):
        """
        Args:
            autowrap_modules: modules whose public functions are recorded as one
                ``call`` node when the traced code calls them on a traced value
                (``math.sqrt(x.size(0))`` -> ``call[math_sqrt](%size)``), as torch.fx's.
            autowrap_functions: more functions recorded that way (free functions
                the traced code reaches as globals), without decorating them.
        """
        self._autowrap_modules = tuple(autowrap_modules)
        self._autowrap_table = autowrap_table(self._autowrap_modules, autowrap_functions)
        self._fn_globals = {}
        self.graph = None
        self.root = None
        self._module_paths = {}
        self._tensor_paths = {}
        self._attr_proxies = {}
        self._arrays = {}
        self._constants = []

    def __deepcopy__(self, memo):
        """``copy.deepcopy`` (of a `Proxy` holding this tracer): Python modules and the traced
        function's globals are shared, not copied (modules cannot be); the rest is copied."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = value if key in _SHARED_ON_COPY else copy.deepcopy(value, memo)
        return new

    # -- what stays one node ---------------------------------------------------------
    def is_leaf_module(self, module, qualname):
        """Whether ``module`` (at ``qualname``) is recorded as one ``call`` node.

        The default keeps every built-in `fxkit.nn` layer (``Linear``, ``Conv2d``,
        ``BatchNorm2d``, ...) and traces through containers (``Sequential``,
        ``ModuleList``, ``ModuleDict``) and user-defined modules.
        """
        cls = type(module)
        return (cls.__module__.startswith(_BUILTIN_PREFIXES) and cls is not nn.Module
                and not isinstance(module, _CONTAINERS))

    # -- recording ---------------------------------------------------------------------
    def create_node(self, op, target, args, kwargs, name=None):
        """Add a node to the graph, with the user's source line in ``meta["stack"]``."""
        node = self.graph.create_node(op, target, args, kwargs, name)
        node.meta["stack"] = user_location(0)
        return node

    def proxy(self, node):
        """The proxy standing for ``node``'s value (override to use a Proxy subclass)."""
        return Proxy(node, self)

    def create_proxy(self, op, target, args, kwargs, name=None):
        """Record ``target(*args, **kwargs)`` and return the proxy of its result.

        Proxies in ``args``/``kwargs`` become their nodes, tensors become
        ``get_attr`` nodes (parameters and buffers by their qualified name,
        other tensors as ``_tensor_constant<N>`` attributes added to the root).
        """
        node = self.create_node(op, target, self.create_arg(args), self.create_arg(kwargs), name)
        return self.proxy(node)

    def record_op(self, op, args, kwargs):
        """The runtime's dispatch hook: an `Op` was called with a proxy among its arguments."""
        return self.create_proxy("call", op, args, kwargs)

    def create_arg(self, a):
        """``a`` as a node argument: proxies -> nodes, tensors -> get_attr nodes, containers mapped."""
        t = type(a)
        if t is Proxy or isinstance(a, Proxy):
            if a.tracer is not self:
                raise trace_error(f"traced value {a.node!r} belongs to another trace")
            return a.node
        if t in _ATOMS:
            return a
        if t is tuple:
            return tuple([self.create_arg(v) for v in a])
        if t is list:
            return [self.create_arg(v) for v in a]
        if t is dict:
            for k in a:
                if isinstance(k, ProxyBase) or find_proxy((k,), {}) is not None:
                    raise trace_error(f"a traced value is used as a dict key ({k!r}); a graph's dict keys are "
                                      f"constants, and the key of a traced value is not known while tracing",
                                      hint="key the dict by a constant (a str or int) and keep the traced value "
                                           "as the value")
            return {k: self.create_arg(v) for k, v in a.items()}
        if t is slice:
            return slice(self.create_arg(a.start), self.create_arg(a.stop), self.create_arg(a.step))
        if isinstance(a, Tensor):
            return self._tensor_proxy(a).node
        if isinstance(a, np.ndarray):
            return self._array_proxy(a).node
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return t(*[self.create_arg(v) for v in a])
        if isinstance(a, nn.Module):
            raise trace_error(f"a module ({t.__name__}) was passed as an argument to a traced call; "
                              f"call the module instead of passing it around")
        hook = getattr(t, "__fx_create_arg__", None)
        if hook is not None:  # torch.fx's protocol: the object records how to rebuild itself
            return hook(a, self)
        if dataclasses.is_dataclass(a) and not isinstance(a, type):
            # As torch.fx: a dataclass (possibly holding traced values) is rebuilt by a call of its class.
            fields = {f.name: self.create_arg(getattr(a, f.name)) for f in dataclasses.fields(a) if f.init}
            return self.create_node("call", t, (), fields)
        return a

    # -- tensors of the module ---------------------------------------------------------
    def _attr_proxy(self, tensor, qualname):
        """The one ``get_attr`` proxy of a parameter, buffer or constant."""
        proxy = self._attr_proxies.get(id(tensor))
        if proxy is None:
            proxy = self._attr_proxies[id(tensor)] = self.proxy(
                self.create_node("get_attr", qualname, (), {}))
            self._constants.append(tensor)  # NOTE: keeps ids unique while the trace runs
        return proxy

    def _tensor_proxy(self, tensor):
        proxy = self._attr_proxies.get(id(tensor))
        if proxy is not None:
            return proxy
        qualname = self._tensor_paths.get(id(tensor))
        if qualname is None:
            qualname = self._new_constant_name()
            # NOTE: what Module.__setattr__ does with a plain tensor; the patched one refuses
            # every assignment while the trace runs.
            object.__setattr__(self.root, qualname, tensor)
        return self._attr_proxy(tensor, qualname)

    def _array_proxy(self, array):
        """A numpy array constant becomes a tensor constant (the op reads the same data)."""
        tensor = self._arrays.get(id(array))
        if tensor is None:
            tensor = self._arrays[id(array)] = Tensor(array)
            self._constants.append(array)
        return self._tensor_proxy(tensor)

    def _new_constant_name(self):
        i = 0
        while hasattr(self.root, f"_tensor_constant{i}"):
            i += 1
        return f"_tensor_constant{i}"

    # -- the trace ---------------------------------------------------------------------
    def trace(self, root, concrete_args=None):
        """Trace ``root`` (an `fxkit.nn.Module` or a function) into a `Graph`.

        Args:
            root: the module whose ``forward`` is traced, or a free function.
            concrete_args: ``{argument name: value}`` of inputs fixed to a constant
                (flags, ``None`` masks, configuration); the graph keeps a
                placeholder with that default, specialises on the value and
                guards it: a call with another value raises `SpecializationError`
                (`fxkit.tracer.specialize`).

        Returns:
            The recorded `Graph`; ``self.root`` is the module it refers to.
        """
        if isinstance(root, nn.Module):
            if isinstance(root, GraphModule):
                root.code  # noqa: B018  (regenerates a stale forward: the class attribute cannot)
            fn = getattr(type(root), self.traced_func_name, None)
            if not callable(fn):
                raise TraceError(f"symbolic_trace: traced_func_name={self.traced_func_name!r} doesn't exist in "
                                 f"{type(root).__name__}; set Tracer.traced_func_name to one of its methods")
            self.root, skip = root, 1
        elif callable(root):
            self.root, fn, skip = nn.Module(), root, 0
        else:
            raise TraceError(f"symbolic_trace: expected an fxkit.nn.Module or a function, got {type(root).__name__}")
        self.graph = Graph(tracer_cls=type(self))
        self._fn_globals = getattr(fn, "__globals__", {})
        self._index_module_tree()
        self._attr_proxies = {}
        self._arrays = {}
        self._constants = []
        args, kwargs = self._placeholders(fn, skip, dict(concrete_args or {}))
        if skip:
            args.insert(0, self.root)
        fn, args, kwargs = flatten_variadic(fn, args, kwargs)
        with patched(self):
            ACTIVE.append(self)
            try:
                result = fn(*args, **kwargs)
            finally:
                ACTIVE.pop()
        self.create_node("output", "output", (self.create_arg(result),), {})
        self._arrays = {}
        self._constants = []
        return self.graph

    def _index_module_tree(self):
        """Qualified names of every submodule, parameter and buffer, in one walk of the tree."""
        modules, tensors = {}, {}
        for name, module in self.root.named_modules():
            modules[id(module)] = name
            prefix = name + "." if name else ""
            for table in (module._parameters, module._buffers):
                for key, tensor in table.items():
                    if tensor is not None:
                        tensors.setdefault(id(tensor), prefix + key)
        for name, module in self.root.named_modules():
            # A plain tensor attribute (``self.table = fxkit.ones(3)``) is read as get_attr under
            # its own name, as torch.fx does; parameters and buffers keep precedence.
            prefix = name + "." if name else ""
            for key, value in vars(module).items():
                if isinstance(value, Tensor) and not key.startswith("__"):
                    tensors.setdefault(id(value), prefix + key)
        self._module_paths, self._tensor_paths = modules, tensors

    def _placeholders(self, fn, skip, concrete_args):
        """One placeholder per argument of ``fn`` (after ``self``); the values to call it with."""
        params = list(inspect.signature(fn).parameters.values())
        if skip and params and params[0].kind in (params[0].VAR_POSITIONAL, params[0].VAR_KEYWORD):
            raise TraceError(f"symbolic_trace: {fn.__qualname__} has no self parameter: self cannot be part of "
                             f"*args expansion; write forward(self, ...)")
        params = params[skip:]
        unknown = set(concrete_args) - {p.name for p in params}
        if unknown:
            raise TraceError(f"symbolic_trace: concrete_args names {sorted(unknown)}, which "
                             f"{fn.__qualname__} does not take (its arguments: {[p.name for p in params]})")
        args, kwargs = [], {}
        guards = []
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                # torch.fx's rule: one placeholder stands for all of them, its target says which.
                stars = "*" if p.kind == p.VAR_POSITIONAL else "**"
                if p.name in concrete_args:
                    raise TraceError(f"symbolic_trace: concrete_args fixes {stars}{p.name} of {fn.__qualname__}; "
                                     f"only named arguments can be fixed")
                kwargs[stars + p.name] = self.proxy(self.create_node("placeholder", stars + p.name, (), {},
                                                                     name=p.name))
                continue
            if p.name in concrete_args:
                value = concrete_args[p.name]
                node = self.create_node("placeholder", p.name, (value,), {}, name=p.name)
                if self.guard_concrete_args and guardable(value):
                    guards.append((node, value, p.name))
            else:
                # NOTE: through create_node, as every node of a trace, so a subclass sees them all.
                node = self.create_node("placeholder", p.name, () if p.default is p.empty else (p.default,), {},
                                        name=p.name)
                value = self.proxy(node)
            if p.kind == p.KEYWORD_ONLY:
                kwargs[p.name] = value
            else:
                args.append(value)
        for node, value, name in guards:  # after every placeholder, as passes expect inputs first
            self.create_node("call", check_specialized, (node, value, name), {})
        return args, kwargs


def symbolic_trace(root, concrete_args=None):
    """Trace a module or function into a `GraphModule` that computes the same outputs.

    Args:
        root: an `fxkit.nn.Module` or a function of tensors.
        concrete_args: ``{argument name: value}`` of inputs to specialise on.

    Returns:
        A `GraphModule` holding the graph, its generated code and the
        parameters it uses.

    Raises:
        TraceError: the code needs a concrete value (``if x.sum() > 0``,
            ``len(x)``, ``int(x)``, numpy on a tensor, ...); the message names
            the line and the ways out.

    Example:
        >>> gm = fxkit.symbolic_trace(model)
        >>> print(gm.code)
    """
    tracer = Tracer()
    graph = tracer.trace(root, concrete_args)
    name = type(root).__name__ if isinstance(root, nn.Module) else getattr(root, "__name__", "")
    return GraphModule(tracer.root, graph, name if name.isidentifier() else "GraphModule")
