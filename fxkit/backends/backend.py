"""`Backend`: what `fxkit.compile` asks of a backend, and the table of backends by name.

A backend is two decisions about one specialisation (one set of input
shapes, dtypes and devices):

* ``passes(gm, example_inputs)``: the passes that prepare the graph, run in
  order by a `PassManager`. The default pipeline (`Backend.passes`) folds
  eval-mode BatchNorm into convolutions and removes inactive dropout while
  layers are still ``call[self.conv1]`` nodes, then `Specialize` traces
  through every layer down to registry ops on the example inputs' metadata
  (so ``x.shape[0]`` and ``if x.ndim == 3`` become constants and every node
  carries ``meta["tensor_meta"]``), then eval-mode ``batch_norm`` ops fold
  into the ``conv2d`` ops before them (a model imported with
  `fxkit.from_torch` has ops, not layers), then dead code, common
  subexpressions and constant sub-graphs go. A backend extends the list (the numba backend
  appends elementwise fusion) rather than rewriting it.
* ``lower(gm, specs)``: turn the prepared graph into a `Lowered`, a Python
  callable over raw arrays (numpy or cupy ndarrays in, raw arrays out, in
  the structure of the graph's output) plus the source of what was
  generated. ``specs`` holds one `TensorMeta` per input; every node's
  ``meta["tensor_meta"]`` is filled in.

`fxkit.compile` does everything else: tracing, guards on each call (inputs
on a device outside ``Backend.device_types`` are refused there), the cache
of specialisations, and Tensors in and out at the boundary. A backend never
sees a Tensor.

The numpy backend's pieces serve any backend generating Python over arrays:
`fxkit.backends.memory_plan` (which calls run as one ufunc, ``ufunc_forms``;
which dead buffer each writes into, ``plan_buffers``) and
`fxkit.codegen.numpy_code.generate_array_code` (the straight-line function;
its ``calls=`` runs chosen nodes as a backend's own kernels, its ``xp=``
selects numpy or cupy).

Backends register by name in one table::

    class NumbaBackend(Backend):
        name = "numba"

        def passes(self, gm, example_inputs):
            return super().passes(gm, example_inputs) + [FuseElementwise()]

        def lower(self, gm, specs):
            ...
            return Lowered(fn, code=driver_source, kernels={"fused_0": kernel_source})

    register_backend(NumbaBackend())

and ``fxkit.compile(model, backend="numba")`` looks it up with `get_backend`.
A backend module is imported by ``fxkit/backends/__init__.py``; a backend
whose library is heavy (numba, cupy) imports it inside ``lower``.
"""
import abc
from typing import NamedTuple

from fxkit.backends.specialize import Specialize
from fxkit.errors import LoweringError
from fxkit.transforms.fold_conv_bn_ops import FoldConvBNOps
from fxkit.transforms import (EliminateCommonSubexpressions, EliminateDeadCode, FoldConstants, FoldConvBN,
                              RemoveDropout)


class Lowered(NamedTuple):
    """The result of `Backend.lower` for one specialisation.

    Attributes:
        fn: ``fn(*arrays) -> raw outputs``: one raw array per graph input, in
            placeholder order; returns the graph's output structure with raw
            arrays where it has tensors.
        code: the generated Python that ``fn`` runs (``compiled.code``).
        kernels: ``{kernel name: source}`` of generated kernels
            (``compiled.kernel_sources()``); empty when none are generated.
        line_nodes: ``{line number in code: graph node}``, so a failure inside
            ``fn`` is reported with the node and its source line.
        filename: the file name ``code`` was compiled under (tracebacks show it).
        decisions: the backend's lowering choices (objects whose ``str`` is one line:
            node, choice, reason), for ``compiled.explain()``.
    """

    fn: object
    code: str
    kernels: dict = {}
    line_nodes: dict = {}
    filename: str = ""
    decisions: tuple = ()


class Backend(abc.ABC):
    """Base class of compile backends: a name, the devices it runs on, a pass list, a lowering.

    Attributes:
        name: the name ``fxkit.compile(..., backend=name)`` selects.
        device_types: the device types (``"cpu"``, ``"cuda"``) its code runs on;
            inputs and parameters elsewhere are refused by the guard.
    """

    name = "backend"
    device_types = ("cpu",)
    # Whether the generated code reads the parameters' arrays themselves (so an in-place write reaches it)
    # rather than copies made when compiling (a delegate's runtime): `fxkit.backends.weight_guard`.
    weights_live = True

    def passes(self, gm, example_inputs):
        """The passes preparing ``gm`` for `lower`, in order.

        Args:
            gm: the traced module (layers still as ``call[self.<path>]`` nodes).
            example_inputs: one `TensorMeta` per input of this specialisation.

        Returns:
            A list of callables ``GraphModule -> GraphModule``.
        """
        # NOTE: folding precomputes from parameter values; `WeightGuard` recomputes (or
        # recompiles) after the parameters are written, so compiled code can be trained through.
        return [
            RemoveDropout(),
            FoldConvBN(),
            Specialize(example_inputs),
            FoldConvBNOps(),
            RemoveDropout(),
            EliminateDeadCode(),
            EliminateCommonSubexpressions(),
            FoldConstants(),
            EliminateDeadCode(),
        ]

    def configure(self, **options):
        """The backend to use for one compiled module given ``fxkit.compile``'s extra keyword ``options``.

        Backends without options return themselves and refuse any; a backend
        with options (the ``onnxruntime`` delegate: threads, providers, ...)
        returns a configured copy.
        """
        if options:
            raise LoweringError(f"fxkit.compile: the {self.name} backend takes no options, got "
                                f"{', '.join(sorted(options))}; options are for backends like onnxruntime")
        return self

    @abc.abstractmethod
    def lower(self, gm, specs):
        """Generate the code of the prepared ``gm`` for inputs ``specs``.

        Args:
            gm: the module `passes` returned, every node's ``meta["tensor_meta"]`` filled.
            specs: one `TensorMeta` per graph input.

        Returns:
            A `Lowered`.
        """

    def __repr__(self):
        return f"<fxkit backend {self.name}>"


_BACKENDS = {}


def register_backend(backend):
    """Make ``backend`` (a `Backend` instance) selectable by its ``name``; returns it."""
    if not isinstance(backend, Backend):
        raise LoweringError(f"register_backend: expected a Backend instance, got {type(backend).__name__}")
    _BACKENDS[backend.name] = backend
    return backend


def get_backend(name):
    """The registered backend called ``name`` (a `Backend` passes through)."""
    if isinstance(name, Backend):
        return name
    backend = _BACKENDS.get(name)
    if backend is None:
        available = ", ".join(sorted(_BACKENDS))
        raise LoweringError(f"fxkit.compile: no backend named {name!r}; available: {available}")
    return backend


def backend_names():
    """The names of every registered backend."""
    return sorted(_BACKENDS)
