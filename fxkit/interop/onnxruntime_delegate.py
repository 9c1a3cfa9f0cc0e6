"""The ``onnxruntime`` backend: supported partitions exported to ONNX in memory, run by onnxruntime.

``fxkit.compile(model, backend="onnxruntime")`` is a `DelegateBackend`: every
``call`` of a registry op with an ONNX export rule (`fxkit.interop.onnx_rules`)
is supported; each partition `partition_by_support` finds is written with
`fxkit.onnx.export` (in memory, its batch dimension symbolic, so one session
serves every batch size) and run by one ``onnxruntime.InferenceSession``; the
other nodes (wrapped Python functions, ops without a rule) run with the numpy
backend, or numba (``fallback="numba"``). Inputs reach the session as the
numpy arrays they are (onnxruntime reads contiguous CPU arrays in place).
Quantized graphs (`fxkit.transforms.quantize.convert`) export as QDQ pairs,
which onnxruntime fuses into its int8 kernels.

Options (keyword arguments of ``fxkit.compile``):
    threads: intra-op threads of each session (default: onnxruntime's, one per core).
    inter_op_threads: inter-op threads (default: onnxruntime's).
    providers: execution providers in order of preference, e.g.
        ``["CUDAExecutionProvider", "CPUExecutionProvider"]`` (default: CPU).
    graph_optimization_level: ``"disable"``, ``"basic"``, ``"extended"`` or ``"all"`` (default).
    spinning: let idle session threads spin (default False: they would starve
        fxkit's own kernels and BLAS between session runs).
    session_options: an ``onnxruntime.SessionOptions`` to start from.
    fallback: the array backend of the unsupported nodes (``"numpy"`` or ``"numba"``).

Example:
    >>> compiled = fxkit.compile(model, backend="onnxruntime", example_inputs=[x], threads=2)
    >>> compiled(x)
"""
import hashlib
import importlib.util

import numpy as np

from fxkit.backends.backend import register_backend
from fxkit.backends.delegate import DelegateBackend
from fxkit.errors import LoweringError
from fxkit.runtime.op import Op

LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}


class OnnxRuntimeDelegate:
    """Exports partitions and runs them in onnxruntime sessions (see the module docstring)."""

    def __init__(self, threads=None, inter_op_threads=None, providers=None, graph_optimization_level="all",
                 spinning=False, session_options=None, opset=17):
        # NOTE: onnx and onnxruntime load here, when a module is compiled for this backend.
        try:
            import onnxruntime
            import fxkit.interop.onnx_export as onnx_export
        except ImportError as exc:
            raise LoweringError(f"the onnxruntime backend needs onnx and onnxruntime ({exc}); "
                                f"pip install onnx onnxruntime") from exc
        from fxkit.interop.onnx_rules import OP_RULES

        self.ort = onnxruntime
        self.export = onnx_export.export
        self.rules = OP_RULES
        self.opset = opset
        available = onnxruntime.get_available_providers()
        self.providers = list(providers) if providers is not None else ["CPUExecutionProvider"]
        missing = [p for p in self.providers if p not in available]
        if missing:
            raise LoweringError(f"the onnxruntime backend: execution provider(s) {', '.join(missing)} are not "
                                f"available in this onnxruntime (available: {', '.join(available)}); for "
                                f"CUDAExecutionProvider install onnxruntime-gpu on a machine with a GPU")
        if graph_optimization_level not in LEVELS:
            raise LoweringError(f"the onnxruntime backend: graph_optimization_level must be one of "
                                f"{', '.join(LEVELS)}, got {graph_optimization_level!r}")
        options = session_options if session_options is not None else onnxruntime.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = threads
        if inter_op_threads is not None:
            options.inter_op_num_threads = inter_op_threads
        if not spinning:
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel,
                                                   LEVELS[graph_optimization_level])
        self.session_options = options

    def is_supported(self, node):
        """A registry op with an ONNX export rule."""
        return isinstance(node.target, Op) and node.target in self.rules

    def prepare(self, child, specs):
        """The child as ONNX bytes (its key: equal graphs share a session) and how to open its session."""
        proto = self.export(child, list(specs), opset=self.opset, dynamic_batch=False)
        data = proto.SerializeToString()
        inputs = [i.name for i in proto.graph.input]
        outputs = [o.name for o in proto.graph.output]
        return hashlib.sha256(data).hexdigest(), lambda: self._runner(data, inputs, outputs)

    def _runner(self, data, inputs, outputs):
        session = self.ort.InferenceSession(data, sess_options=self.session_options, providers=self.providers)
        return SessionRunner(session, inputs, outputs, data)

    def describe(self, child):
        calls = sum(1 for n in child.graph.nodes if n.op == "call")
        return f"{calls} ops in one onnxruntime session ({', '.join(self.providers)})"


class SessionRunner:
    """Runs one session on raw arrays: ``runner(*arrays)`` -> an array, or a tuple of them.

    Attributes:
        session: the ``onnxruntime.InferenceSession``.
        model_bytes: the serialized ONNX model it runs (to save it, or to open another session on it).
    """

    __name__ = "onnxruntime_session"  # the generated code calls it by this name (numbered when several)

    def __init__(self, session, inputs, outputs, model_bytes):
        self.session = session
        self.model_bytes = model_bytes
        self._run = session.run
        self._inputs = tuple(inputs)
        self._outputs = list(outputs)
        self._single = len(outputs) == 1

    def __call__(self, *arrays):
        # NOTE: ascontiguousarray returns a contiguous array itself (no copy); onnxruntime reads it in place.
        feed = {name: np.ascontiguousarray(a) for name, a in zip(self._inputs, arrays)}
        results = self._run(self._outputs, feed)
        return results[0] if self._single else tuple(results)


if importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None:
    register_backend(DelegateBackend("onnxruntime", OnnxRuntimeDelegate))
