"""`DelegateBackend`: run the partitions another runtime supports there, the rest with an array backend.

A *delegate* is a runtime that takes whole sub-graphs (onnxruntime, a vendor
SDK). It tells which nodes it can run (``is_supported``) and turns a
sub-graph into a function over raw arrays (``build``). The backend

1. prepares the graph with the default pipeline (`Backend.passes`), but
   specialised with a *symbolic* batch dimension ``N`` (dimension 0 of every
   input whose size equals the first input's), so the sub-graphs it hands the
   delegate do not depend on the batch size: a delegate builds one runner per
   sub-graph and every batch size reuses it (runners are cached by the
   delegate's key of the sub-graph, per compiled module). A model whose code
   needs the concrete batch size (``if x.shape[0] > 4``, an ``expand`` to a
   size read from the input) is prepared on concrete sizes instead: one runner
   per batch size;
2. cuts the graph with `partition_by_support` into ``supported_<i>`` children
   (its last pass: ``compiled.graph`` shows the partitions);
3. gives each child to the delegate, then lowers the parent (the unsupported
   nodes, with ``N`` replaced by this call's size) with the fallback array
   backend (``numpy``, or ``numba`` with its fusion passes), each child's call
   running the delegate's runner.

Guards, the cache of specialisations and Tensors at the boundary are
`fxkit.compile`'s, as for every backend. Delegates register themselves from
the layer that may import their runtime (``fxkit.interop`` registers
``onnxruntime``)::

    register_backend(DelegateBackend("onnxruntime", OnnxRuntimeDelegate))

Example:
    >>> compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=[x], threads=2)
    >>> print(compiled.graph)        # %supported_0 = call[self.supported_0](%x) ...
"""
import copy

import numpy as np

from fxkit.backends.backend import Backend, get_backend
from fxkit.backends.numpy_backend import _check_devices, build_forward
from fxkit.errors import FxkitError, LoweringError
from fxkit.graph import GraphModule, Node, map_aggregate
from fxkit.runtime.meta import TensorMeta
from fxkit.transforms import Pass, PassManager
from fxkit.transforms.partition import partition_by_support
from fxkit.transforms.symbolic import Sym

BATCH = "N"
"""The name of the symbolic batch dimension of the sub-graphs given to a delegate."""


class DelegateBackend(Backend):
    """Supported partitions on a delegate runtime, the rest on an array backend (see the module docstring).

    Args:
        name: the backend's name for ``fxkit.compile(..., backend=name)``.
        delegate: a class called with the compile options (``fxkit.compile``'s
            keyword arguments other than ``fallback``), once per compiled module;
            its instance provides ``is_supported(node)``, ``describe(child)`` (one
            line for ``compiled.kernel_sources()``) and ``prepare(child, specs)``
            returning ``(key, build)``: a hashable identity of the sub-graph as
            the runtime sees it (equal keys share a runner) and a function
            ``build()`` making the runner, a function of raw arrays returning
            the child's raw output (a tuple when it has several). ``prepare``
            raises `LoweringError` for a sub-graph it cannot take.
        fallback: the array backend running the unsupported nodes (``"numpy"``).
    """

    device_types = ("cpu",)
    weights_live = False  # NOTE: the partitions' weights are copied into the delegate's sessions

    def __init__(self, name, delegate, fallback="numpy", options=None):
        self.name = name
        self.delegate_class = delegate
        self.fallback = fallback
        self.options = dict(options or {})
        self._delegate = None
        self._runners = {}

    def configure(self, fallback=None, **options):
        """A fresh backend (its own runner cache) with these delegate options and fallback backend."""
        fallback = self.fallback if fallback is None else fallback
        get_backend(fallback)  # refuse an unknown name now
        return DelegateBackend(self.name, self.delegate_class, fallback, {**self.options, **options})

    @property
    def runners(self):
        """``{key: runner}`` built so far for this compiled module (one per distinct sub-graph)."""
        return dict(self._runners)

    @property
    def delegate(self):
        """The delegate instance, built from the options on first use (its runtime loads then)."""
        if self._delegate is None:
            self._delegate = self.delegate_class(**self.options)
        return self._delegate

    def passes(self, gm, example_inputs):
        return [_PrepareBatchFree(super().passes, example_inputs), _Partition(self)]

    def lower(self, gm, specs):
        values = _batch_values(gm, specs)
        calls = {}
        for node in gm.graph.nodes:
            if node.op == "call" and type(node.target) is str and "partition" in node.meta:
                calls[node] = self._runner(gm.get_submodule(node.target), values)
        _concretize(gm.graph, values)
        fallback = get_backend(self.fallback)
        extra = _extra_passes(fallback, gm, specs)
        if extra:
            names = {node.name: runner for node, runner in calls.items()}
            gm = PassManager(extra)(gm)
            calls = {n: names[n.name] for n in gm.graph.nodes if n.name in names}
        _check_devices(list(gm.graph.nodes), self.device_types, self.name)
        kernels = {node.target: f"# runs on {self.name}: {self.delegate.describe(gm.get_submodule(node.target))}"
                   for node in calls}
        more, more_kernels, writers, decisions = fallback.kernel_calls(gm)
        return build_forward(gm, list(gm.graph.nodes), np, self.name, {**calls, **more},
                             {**kernels, **more_kernels}, writers, decisions)

    def _runner(self, child, values):
        """The delegate's runner of ``child``: batch-free when it exports so, else for this batch size."""
        try:
            key, build = self.delegate.prepare(child, _placeholder_metas(child))
        except LoweringError:
            if not values:
                raise
            # NOTE: a sub-graph the delegate cannot take with a symbolic batch (its batch
            # appears only as 2*N, say) is built for the concrete sizes of this call.
            child = copy.deepcopy(child)
            _concretize(child.graph, values)
            key, build = self.delegate.prepare(child, _placeholder_metas(child))
        runner = self._runners.get(key)
        if runner is None:
            runner = self._runners[key] = build()
        return runner

    def __repr__(self):
        return f"<fxkit backend {self.name} (fallback {self.fallback})>"


class _PrepareBatchFree(Pass):
    """The default pipeline with a symbolic batch, or on concrete sizes where the model needs them.

    A model may compute with its batch size as a number (``if x.shape[0] > 4``, an
    ``expand`` to a size read from the input): then some pass of the symbolic run fails,
    and the pipeline runs again, from the same graph, on the concrete sizes.
    """

    name = "prepare (symbolic batch)"

    def __init__(self, pipeline, concrete):
        self.pipeline = pipeline
        self.concrete = tuple(concrete)

    def __call__(self, gm):
        batch_free = _batch_free(self.concrete)
        if batch_free is not None:
            fresh = GraphModule(gm, gm.graph.copy(), class_name=type(gm).__name__)
            try:
                return PassManager(self.pipeline(fresh, batch_free))(fresh)
            except FxkitError:
                pass  # the model needs its concrete batch size somewhere
        return PassManager(self.pipeline(gm, self.concrete))(gm)


class _Partition(Pass):
    """`partition_by_support` with the backend's delegate: the last pass, so ``compiled.graph`` shows it."""

    name = "partition_by_support"

    def __init__(self, backend):
        self.backend = backend

    def __call__(self, gm):
        delegate = self.backend.delegate
        return partition_by_support(gm, lambda node: _delegable(node, delegate))


def _batch_free(specs):
    """``specs`` with dimension 0 symbolic where it equals the first input's, or None (no batch to free)."""
    if not specs or not specs[0].shape:
        return None
    batch = specs[0].shape[0]
    symbol = Sym.symbol(BATCH)
    return tuple(TensorMeta((symbol,) + tuple(s.shape[1:]), s.dtype, s.device) if s.shape and s.shape[0] == batch
                 else s for s in specs)


def _batch_values(gm, specs):
    """``{"N": size}`` when ``gm`` was specialised with a symbolic batch, else ``{}``."""
    for node, spec in zip((n for n in gm.graph.nodes if n.op == "placeholder"), specs):
        meta = node.meta.get("tensor_meta")
        if isinstance(meta, TensorMeta) and meta.shape and isinstance(meta.shape[0], Sym):
            return {BATCH: spec.shape[0]}
    return {}


def _placeholder_metas(gm):
    return [n.meta["tensor_meta"] for n in gm.graph.nodes if n.op == "placeholder"]


def _delegable(node, delegate):
    """The delegate supports ``node`` and it computes tensors from tensors (delegates take nothing else).

    An op returning a tuple (``chunk``) qualifies when only ``getitem`` reads it; such a
    ``getitem`` qualifies with its source, so the tuple never crosses a partition's edge.
    """
    if not delegate.is_supported(node):
        return False
    if getattr(node.target, "name", None) == "getitem":
        source = node.args[0]
        return isinstance(source, Node) and _tensor_tuple(source) and _delegable(source, delegate)
    meta = node.meta.get("tensor_meta")
    if not (isinstance(meta, TensorMeta) or _tensor_tuple(node)):
        return False
    return all(isinstance(u.meta.get("tensor_meta"), TensorMeta) for u in node.all_input_nodes)


def _tensor_tuple(node):
    """``node`` returns a tuple of tensors read only by ``getitem``."""
    meta = node.meta.get("tensor_meta")
    return (isinstance(meta, (tuple, list)) and len(meta) > 0 and all(isinstance(m, TensorMeta) for m in meta)
            and all(getattr(u.target, "name", None) == "getitem" for u in node.users))


def _concretize(graph, values):
    """Replace the symbolic batch by its size in every node's arguments and ``tensor_meta``."""
    if not values:
        return
    for node in graph.nodes:
        node.args = map_aggregate(node.args, lambda v: v.subs(**values) if isinstance(v, Sym) else v)
        node.kwargs = map_aggregate(node.kwargs, lambda v: v.subs(**values) if isinstance(v, Sym) else v)
        meta = node.meta.get("tensor_meta")
        if meta is not None:
            node.meta["tensor_meta"] = _subs_meta(meta, values)


def _subs(value, values):
    return value.subs(**values) if isinstance(value, Sym) else value


def _subs_meta(meta, values):
    if isinstance(meta, TensorMeta):
        return TensorMeta(tuple(_subs(d, values) for d in meta.shape), meta.dtype, meta.device)
    if isinstance(meta, (tuple, list)):
        items = [_subs_meta(m, values) for m in meta]
        return type(meta)(*items) if hasattr(meta, "_fields") else type(meta)(items)
    return _subs(meta, values)


def _extra_passes(fallback, gm, specs):
    """The passes ``fallback`` adds to the default pipeline (numba's fusion), for the parent graph."""
    default = Backend.passes(fallback, gm, specs)
    return fallback.passes(gm, specs)[len(default):]

