"""Runs one model through every execution path and every given pass, comparing with eager.

Paths: eager (the reference), the `symbolic_trace`'d GraphModule, the
`Interpreter`, and ``gm.code`` re-executed from its text alone. Then each pass
runs on its own deep copy of the traced module (so passes that rewrite
parameters in place cannot leak into each other or into the model); its
result is linted and run through the same paths.

Tracing and structure-only passes replay the same ops in the same order, so
they must match eager bit for bit. A pass that changes arithmetic (conv-bn
folding, fusion into other kernels) says how close it stays through its
``rtol``/``atol`` attributes (`fxkit.transforms.Pass`), or the caller passes
``rtol``/``atol`` here.

Example:
    >>> model, inputs = zoo_model("lenet")
    >>> check_model_paths(model, inputs, passes=[eliminate_dead_code])

The zoo helpers list every `fxkit.models` model with small example inputs
(ResNet-50 at 1x3x64x64); ``@pytest.mark.parametrize("name", zoo_params())``
runs a test over all of them with the big ones marked slow.
"""
import copy
import functools

import numpy as np
import pytest

import fxkit
import fxkit.models
from fxkit.graph import Interpreter
from fxkit.transforms import pass_name
from tests.tracer.paths import assert_same

@functools.lru_cache(maxsize=None)
def _built(name):
    fxkit.manual_seed(0)
    return fxkit.models.get(name)


# Small example inputs where the zoo's own would be slow; other models run at batch 2.
_SMALL = {
    "transformer_block": [(2, 16, 128)],
    "resnet18": [(2, 3, 64, 64)],
    "resnet50": [(1, 3, 64, 64)],
}
SLOW_MODELS = {"resnet18", "resnet50", "transformer_block"}


def _small_shapes(name):
    if name in _SMALL:
        return _SMALL[name]
    _, shapes = _built(name)
    return [(2, *s[1:]) for s in shapes]


ZOO_SHAPES = {name: _small_shapes(name) for name in fxkit.models.names()}
"""Every zoo model's name -> small example input shapes, one per forward argument."""


def zoo_params():
    """Every zoo model name as a pytest param, the big ones marked ``slow``."""
    return [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW_MODELS else [], id=n)
            for n in fxkit.models.names()]


def zoo_model(name, seed=0):
    """``(model, inputs)``: the zoo model in eval mode and random float32 inputs (never zeros).

    The model is built once per name and shared: do not mutate it (passes in
    `check_model_paths` run on copies).
    """
    rng = np.random.default_rng(seed)
    inputs = tuple(fxkit.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ZOO_SHAPES[name])
    return _built(name)[0], inputs


def assert_close(actual, expected, rtol, atol, path=""):
    """Like `assert_same`, with ``np.allclose``-style tolerance on floating tensors."""
    if isinstance(expected, fxkit.Tensor):
        assert isinstance(actual, fxkit.Tensor), f"{path}: expected a Tensor, got {type(actual).__name__}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=rtol, atol=atol, err_msg=path)
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), f"{path}: structure differs"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, rtol, atol, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), f"{path}: keys differ"
        for k in expected:
            assert_close(actual[k], expected[k], rtol, atol, f"{path}[{k!r}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def rerun_code(gm, inputs):
    """Execute ``gm.code`` from its text alone (fresh compile, the graph's globals)."""
    namespace = dict(gm.graph.python_code(root="self").globals)
    exec(compile(gm.code, "<re-exec of gm.code>", "exec"), namespace)
    return namespace["forward"](gm, *inputs)


def run_paths(gm, inputs):
    """``{path: output}`` for the GraphModule, the Interpreter and the re-executed code; lints first."""
    gm.graph.lint()
    return {
        "GraphModule": gm(*inputs),
        "Interpreter": Interpreter(gm).run(*inputs),
        "gm.code re-exec": rerun_code(gm, inputs),
    }


def check_model_paths(model, inputs, passes=(), rtol=None, atol=None):
    """Compare eager, traced, interpreted, re-executed and each pass's output; lint every graph.

    Args:
        model: an `fxkit.nn.Module` (traced here) or a function.
        inputs: the forward arguments.
        passes: callables ``GraphModule -> GraphModule``, each run on a deep copy of the trace.
        rtol, atol: tolerance for the passes' outputs; None takes the pass's own
            ``rtol``/``atol`` attributes, and exact equality when it has none (or both are 0).

    Returns:
        ``(traced_gm, {pass name: transformed gm})``.
    """
    expected = model(*inputs)
    gm = fxkit.symbolic_trace(model)
    for path, out in run_paths(gm, inputs).items():
        assert_same(out, expected, path)
    transformed = {}
    for p in passes:
        name = pass_name(p)
        result = p(copy.deepcopy(gm))
        assert isinstance(result, fxkit.GraphModule), f"{name} returned {type(result).__name__}, not a GraphModule"
        tol_r = rtol if rtol is not None else getattr(p, "rtol", 0.0)
        tol_a = atol if atol is not None else getattr(p, "atol", 0.0)
        for path, out in run_paths(result, inputs).items():
            where = f"after {name}, {path}"
            if tol_r or tol_a:
                assert_close(out, expected, tol_r, tol_a, where)
            else:
                assert_same(out, expected, where)
        transformed[name] = result
    return gm, transformed
