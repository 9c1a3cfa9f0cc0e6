"""Zoo models exported once per test session, shared by the export and import tests.

``exported(name)`` is ``(model, inputs, proto)``: the zoo model and its small
example inputs from `tests.transforms.model_paths`, and the ONNX model exported
with a symbolic batch dimension. ``relative_error`` is the acceptance metric:
the largest absolute difference over the largest reference magnitude.
"""
import functools

import numpy as np

import fxkit
from tests.transforms.model_paths import zoo_model


@functools.lru_cache(maxsize=None)
def exported(name):
    model, inputs = zoo_model(name)
    return model, inputs, fxkit.onnx.export(model, inputs)


def other_batch(inputs, batch=3, seed=1):
    """Fresh random inputs like ``inputs`` with another batch size (the exported one is symbolic)."""
    rng = np.random.default_rng(seed)
    return tuple(fxkit.from_numpy(rng.standard_normal((batch, *x.shape[1:])).astype(np.float32)) for x in inputs)


def as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def relative_error(actual, expected):
    """max |actual - expected| / max |expected| (numpy arrays or Tensors)."""
    actual, expected = (np.asarray(v.numpy() if isinstance(v, fxkit.Tensor) else v, np.float64)
                        for v in (actual, expected))
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    return float(np.max(np.abs(actual - expected)) / max(float(np.max(np.abs(expected))), 1e-30))


def run_onnxruntime(proto, inputs, optimize=True):
    """The outputs onnxruntime computes for ``proto`` on ``inputs`` (Tensors), as a tuple.

    ``optimize=False`` turns graph optimisations off: no fused int8 kernels, onnxruntime's
    reference of what a QDQ model means, the same on every CPU.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if not optimize:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {info.name: x.numpy() for info, x in zip(session.get_inputs(), inputs)}
    return tuple(session.run(None, feeds))
