"""Runs one traced model through every path and checks each against eager.

Tracing records the same ops in the same order as eager execution, so every
path must give bit-identical outputs: the GraphModule, the Interpreter, a
round-tripped Transformer, deepcopy, pickle and save/load.
"""
import copy
import pickle

import numpy as np

import fxkit
from fxkit.graph import Interpreter, Transformer


def assert_same(actual, expected, path=""):
    """Exact equality of nested outputs: same structure, dtypes, shapes and bits."""
    if isinstance(expected, fxkit.Tensor):
        assert isinstance(actual, fxkit.Tensor), f"{path}: expected a Tensor, got {type(actual).__name__}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        np.testing.assert_array_equal(actual.numpy(), expected.numpy(), err_msg=path)
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected) and len(actual) == len(expected), \
            f"{path}: {type(actual).__name__} of {len(actual)} != {type(expected).__name__} of {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and list(actual) == list(expected), f"{path}: keys differ"
        for k in expected:
            assert_same(actual[k], expected[k], f"{path}[{k!r}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def check_all_paths(model, inputs, tmp_path=None, gm=None):
    """Trace ``model`` (unless ``gm`` is given) and compare every execution path with eager.

    Returns the GraphModule.
    """
    expected = model(*inputs)
    if gm is None:
        gm = fxkit.symbolic_trace(model)
    gm.graph.lint()
    results = {
        "GraphModule": gm(*inputs),
        "Interpreter": Interpreter(gm).run(*inputs),
        "Transformer": Transformer(gm).transform()(*inputs),
        "deepcopy": copy.deepcopy(gm)(*inputs),
        "pickle": pickle.loads(pickle.dumps(gm))(*inputs),
    }
    if tmp_path is not None:
        fxkit.save(gm, tmp_path / "saved.zip")
        results["save/load"] = fxkit.load(tmp_path / "saved.zip")(*inputs)
    for name, out in results.items():
        assert_same(out, expected, name)
    return gm
