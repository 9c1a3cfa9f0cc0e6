"""`GraphModule`: an `fxkit.nn.Module` whose ``forward`` is generated from a `Graph`.

It holds the graph, only the parameters, buffers and submodules the graph
references (copied from the root module), and the Python code generated from
the graph. Edits to the graph mark the code stale; it is regenerated on the
next call, ``gm.forward`` access or read of ``gm.code``, so a pass editing a
thousand nodes regenerates once.

Example:
    >>> gm = GraphModule(model, graph)
    >>> print(gm.code)
    def forward(self, x):
        ...
    >>> gm(x)
"""
import ast
import itertools
import linecache
import os
import types
import weakref

from fxkit.errors import GraphError
from fxkit.graph.attributes import assign_attr
from fxkit.graph.call_errors import note_generated_frame
from fxkit.graph.display import module_html
from fxkit.graph.draw import to_svg
from fxkit.graph.float_dtype import module_float_dtype, retarget_float_dtype
from fxkit.graph.graph import Graph
from fxkit.graph.printer import format_type
from fxkit.graph.to_folder import write_folder
from fxkit.runtime.nn.module import Module, _parse_to_args

_FILE_NUMBERS = itertools.count()
_GENERATED_CLASS = "_fxkit_generated_class"
# What a GraphModule keeps in its __dict__ besides Module's own fields.
_STATE = frozenset({"_graph", "_python_code", "_code_version", "_linecache_key", "_finalizer", "meta"})


class _Forward:
    """``GraphModule.forward``: the generated function, regenerated first when stale.

    NOTE: the staleness check is one comparison of version numbers, so an
    up-to-date module pays nothing measurable per call.
    """

    def __get__(self, gm, owner=None):
        if gm is None:
            return owner.__dict__.get("_generated_forward", self)
        if gm._code_version != gm._graph._version:
            gm.recompile()
        return types.MethodType(type(gm)._generated_forward, gm)


class GraphModule(Module):
    """A module running the code generated from ``graph``.

    Args:
        root: the module the graph was traced from (attributes are copied from
            it), or a dict of qualified name -> module/tensor/value.
        graph: the graph; the module becomes its ``owning_module``.
        class_name: the name of the generated class (shown in ``print_readable``).

    Attributes:
        graph: the graph; assigning a new one regenerates the code lazily.
        code: the generated ``forward`` source.
        meta: a dict for passes' annotations of the whole module (``copy.deepcopy`` copies it).
    """

    forward = _Forward()

    def __call__(self, *args, **kwargs):
        try:
            # NOTE: through Module.__call__, which a running trace patches to see submodule calls.
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            note_generated_frame(self, exc)
            raise

    def __new__(cls, *args, **kwargs):
        # Each instance gets its own class, so its forward is a class attribute.
        base = _base_class(cls)
        generated = type(base.__name__, (base,), {_GENERATED_CLASS: True, "__module__": base.__module__})
        return super().__new__(generated)

    def __init__(self, root, graph, class_name="GraphModule"):
        super().__init__()
        cls = type(self)
        cls.__name__ = cls.__qualname__ = class_name
        for node in graph.nodes:
            if node.op in ("get_attr", "call") and type(node.target) is str:
                _check_free(node.target.split(".")[0], node)
        if isinstance(root, Module):
            self.training = root.training
            for node in graph.nodes:
                if node.op in ("get_attr", "call") and type(node.target) is str:
                    try:
                        _copy_attr(root, self, node.target)
                    except AttributeError as exc:
                        raise GraphError(f"GraphModule: node {node.format_node()} needs {node.target!r}, "
                                         f"which the root module does not have ({exc})") from exc
        elif isinstance(root, dict):
            for node in graph.nodes:
                if node.op in ("get_attr", "call") and type(node.target) is str:
                    if node.target not in root:
                        raise GraphError(f"GraphModule: node {node.format_node()} needs {node.target!r}, "
                                         f"which the root dict does not hold; add it to the dict")
                    assign_attr(self, node.target, root[node.target])
        else:
            raise GraphError(f"GraphModule: root must be an fxkit.nn.Module or a dict, got {type(root).__name__}")
        self.__dict__["meta"] = {}  # the module's own annotations (torch.fx's GraphModule.meta); copies keep them
        self.__dict__["_linecache_key"] = None
        self.graph = graph
        self.recompile()

    # -- the graph and its code --------------------------------------------------------
    @property
    def graph(self):
        """The graph this module runs."""
        return self.__dict__["_graph"]

    @graph.setter
    def graph(self, graph):
        if not isinstance(graph, Graph):
            raise GraphError(f"GraphModule.graph must be a Graph, got {type(graph).__name__}")
        d = self.__dict__
        d["_graph"] = graph
        d["_code_version"] = -1
        graph.owning_module = self

    @property
    def code(self):
        """The generated ``forward`` source (regenerated first when the graph changed)."""
        if self._code_version != self._graph._version:
            self.recompile()
        return self.__dict__["_python_code"].src

    def recompile(self):
        """Compile ``forward`` from the graph now (code generation is skipped when the
        graph has not changed since it last generated code).

        Returns:
            The `fxkit.codegen.python.PythonCode` compiled.
        """
        d = self.__dict__
        graph = d["_graph"]
        cls = type(self)
        code = graph.python_code(root="self")
        filename = f"<fxkit-generated {cls.__name__} #{next(_FILE_NUMBERS)}{_traced_from(graph)}>.py"
        namespace = dict(code.globals)  # the code may be shared: the graph caches it
        exec(code.compile(filename), namespace)
        forward = namespace["forward"]
        forward.__qualname__ = f"{cls.__name__}.forward"
        cls._generated_forward = forward
        # NOTE: linecache loads the source lazily (only when a traceback or
        # inspect asks), so tracebacks through forward show the generated lines.
        _forget_source(d.get("_linecache_key"))
        linecache.cache[filename] = (lambda: code.src,)
        d["_linecache_key"] = filename
        finalizer = d.get("_finalizer")
        if finalizer is not None:
            finalizer.detach()
        d["_finalizer"] = weakref.finalize(self, _forget_source, filename)
        d["_python_code"] = code
        d["_code_version"] = graph._version
        return code

    def print_readable(self, print_output=True):
        """The generated class as source, with ``# f32[3, 4]`` comments where meta has shapes.

        Args:
            print_output: also print it.

        Returns:
            The text.
        """
        text = self._readable(type(self).__name__)
        if print_output:
            print(text)
        return text

    def _readable(self, class_name):
        self.code  # noqa: B018  (regenerate when stale)
        code = self.__dict__["_python_code"]
        lines = code.src.rstrip("\n").split("\n")
        # Parse the rendered text to find the line each statement ends on.
        body = ast.parse(code.src).body[0].body
        for statement, node in zip(body, code.statement_nodes):
            shown = format_type(node.meta) if node is not None else ""
            if shown:
                lines[statement.end_lineno - 1] += f"  # {shown}"
        out = [f"class {class_name}(fxkit.nn.Module):"] + ["    " + line for line in lines]
        for name, child in self.named_children():
            if isinstance(child, GraphModule):
                nested = child._readable(name if name.isidentifier() else type(child).__name__)
                out += [""] + ["    " + line for line in nested.split("\n")]
        return "\n".join(out)

    def to_folder(self, folder, module_name="FxModule"):
        """Write this module as an importable package (torch.fx's ``to_folder``).

        ``folder/module.py`` holds class ``module_name`` (submodules rebuilt from
        their constructor arguments, the generated ``forward``), ``folder/state_dict.npz``
        the weights; ``from folder import FxModule; FxModule()(x)`` equals ``gm(x)``.
        See `fxkit.graph.to_folder` for what can be written.
        """
        write_folder(self, folder, module_name)

    # -- dtype casts ---------------------------------------------------------------------
    def to(self, *args, **kwargs):
        """`Module.to`; a floating dtype also retargets the graph's dtype constants (see `float_dtype`)."""
        _, dtype = _parse_to_args(args, dict(kwargs))
        if dtype is not None and dtype.is_floating_point:
            self._retarget_float_dtype(dtype)
        return super().to(*args, **kwargs)

    def _cast_floats(self, dtype):
        self._retarget_float_dtype(dtype)
        return super()._cast_floats(dtype)

    def _retarget_float_dtype(self, dtype):
        """This graph's and every nested GraphModule's (a split's stages) dtype constants, before the cast."""
        old = module_float_dtype(self)
        for module in self.modules():
            if isinstance(module, GraphModule):
                retarget_float_dtype(module._graph, old, dtype)

    # -- submodules ----------------------------------------------------------------------
    def add_submodule(self, target, module):
        """Add ``module`` at the dotted path ``target``, creating empty parents as needed.

        Returns:
            False when a non-module attribute blocks the path, else True.
        """
        *path, field = target.split(".")
        _check_free((path or [field])[0])
        parent = self
        for item in path:
            child = parent._modules.get(item) if isinstance(parent, Module) else None
            if child is None:
                if hasattr(parent, item):
                    return False
                child = Module()
                parent.add_module(item, child)
            parent = child
        if not isinstance(parent, Module):
            return False
        parent.add_module(field, module)
        return True

    def delete_submodule(self, target):
        """Remove the submodule at ``target``; False when there is none."""
        *path, field = target.split(".")
        try:
            parent = self.get_submodule(".".join(path))
        except AttributeError:
            return False
        if field not in parent._modules:
            return False
        del parent._modules[field]
        return True

    def delete_all_unused_submodules(self):
        """Remove every submodule the graph neither calls nor reads attributes from."""
        used = set()
        for node in self._graph.nodes:
            if node.op in ("call", "get_attr") and type(node.target) is str:
                parts = node.target.split(".")
                used.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                if node.op == "call":
                    used.update(name for name, _ in self.get_submodule(node.target).named_modules(prefix=node.target))
        for name, _ in list(self.named_modules()):
            if name and name not in used:
                self.delete_submodule(name)

    # -- copying and pickling ------------------------------------------------------------
    def __reduce__(self):
        # By graph and state, never by the generated function: it is regenerated on load.
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_python_code", "_code_version", "_linecache_key", "_finalizer")}
        # NOTE: the state comes third, so copy.deepcopy memoises the new module before copying the
        # state, and a meta entry referring back to the module copies without recursing.
        return (_empty_graph_module, (_base_class(type(self)), type(self).__name__), state)

    def __setstate__(self, state):
        state = dict(state)
        graph = state.pop("_graph")
        self.__dict__.update(state)
        self.__dict__["_linecache_key"] = None
        self.graph = graph
        self.recompile()

    def __str__(self):
        return f"{super().__repr__()}\n\n{self.code}"

    def _repr_html_(self):
        """Jupyter's view: the picture (when Graphviz's ``dot`` is installed) over the coloured graph."""
        return module_html(self)

    def _repr_svg_(self):
        """The picture alone as SVG text; None without ``dot`` (Jupyter then skips it)."""
        return to_svg(self)


def _check_free(name, node=None):
    """Refuse a top-level submodule, parameter or buffer named like a GraphModule field.

    NOTE: ``self.code`` in the generated forward would read the property, not a submodule
    named ``code``; one named ``_graph`` would replace the graph. Such names fail
    here, where the model is traced or loaded, not when it is first called.
    """
    if name in _STATE or name in _module_fields() or hasattr(GraphModule, name):
        where = f"node {node.format_node()} reads" if node is not None else "adding"
        raise GraphError(f"GraphModule: {where} a submodule, parameter or buffer named {name!r}, which is a "
                         f"field of GraphModule itself ({'method' if callable(getattr(GraphModule, name, None)) else 'attribute'}); "
                         f"rename it in the model (e.g. {name.strip('_')}_)")


def _module_fields(cache=[]):  # noqa: B006  (computed once, on first use)
    if not cache:
        cache.append(frozenset(vars(Module())))
    return cache[0]


def _empty_graph_module(base, class_name):
    gm = base.__new__(base)
    type(gm).__name__ = type(gm).__qualname__ = class_name
    return gm


def _base_class(cls):
    """The first class of ``cls``'s MRO that is no per-instance generated class."""
    return next(klass for klass in cls.__mro__ if not klass.__dict__.get(_GENERATED_CLASS, False))


def _traced_from(graph):
    """`` from model.py``: the file the graph's first traced node came from (torch.fx names the generated
    code's file after it too), or ``""``."""
    for node in graph.nodes:
        stack = node.meta.get("stack")
        if stack is not None and getattr(stack, "filename", None):
            return f" from {os.path.basename(stack.filename)}"
    return ""


def _forget_source(filename):
    if filename is not None:
        linecache.cache.pop(filename, None)


def _copy_attr(source, target, qualname):
    """Copy ``source.<qualname>`` to ``target``, creating plain parent Modules on the way."""
    *path, field = qualname.split(".")
    for item in path:
        child = getattr(source, item)
        existing = target._modules.get(item) if isinstance(target, Module) else None
        if existing is None:
            existing = Module()
            existing.training = getattr(child, "training", target.training)
            target.add_module(item, existing)
        source, target = child, existing
    if field in target._modules or field in target._parameters or field in target._buffers:
        return
    value = getattr(source, field)
    persistent = field not in getattr(source, "_non_persistent_buffers_set", ())
    assign_attr(target, field, value, persistent)
