"""Every elementwise op's kernel template, evaluated with numpy, against the op itself.

Fused numba and CUDA kernels are generated from the templates, so a wrong
template is a wrong compiled model: each op case of ``tests/runtime/cases`` is
run eagerly and through its template and the two must agree.

Names in a template: the impl's parameters without defaults are the inputs
``a, b, c`` in order (``where(condition, a, b)`` reads ``where(a, b, c)``);
parameters with defaults (``alpha``, ``min``) keep their names.
"""
import ast
import copy
import inspect

import numpy as np
import pytest

import fxkit
from fxkit.runtime.ops import intrinsics
from fxkit.runtime.ops.elementwise_binary import promoted_meta
from fxkit.runtime.registry import get_op
from tests.runtime.opcheck import load_all_cases, to_fxkit, to_meta

INPUTS = ("a", "b", "c")
ELEMENTWISE_CASES = [c for c in load_all_cases() if get_op(c.op).kind == "elementwise"]
# Python syntax a template may use: arithmetic, comparisons, calls of intrinsics, names, constants.
ALLOWED_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.Name, ast.Load, ast.Constant,
                 ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr,
                 ast.BitXor, ast.LShift, ast.RShift, ast.Invert, ast.USub, ast.UAdd, ast.Eq, ast.NotEq, ast.Lt,
                 ast.LtE, ast.Gt, ast.GtE)


def bind(op, args, kwargs):
    """The template's namespace for a call: inputs as ``a, b, c``, defaulted parameters by name."""
    params = list(inspect.signature(op.impl).parameters.values())[1:]  # skip xp
    bound = inspect.signature(op.impl).bind(None, *args, **kwargs)
    bound.apply_defaults()
    inputs = [bound.arguments[p.name] for p in params if p.default is inspect.Parameter.empty]
    options = {p.name: bound.arguments[p.name] for p in params if p.default is not inspect.Parameter.empty}
    return dict(zip(INPUTS, inputs)), options


def template_text(op, options):
    return op.template(**options) if callable(op.template) else op.template


def check_syntax(op, text, names):
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        assert isinstance(node, ALLOWED_NODES), f"{op.name}: template {text!r} uses {type(node).__name__}"
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name) and node.func.id in intrinsics.NAMES and not node.keywords, (
                f"{op.name}: template {text!r} calls something other than an intrinsic: {ast.unparse(node)}")
        elif isinstance(node, ast.Name) and node.id not in intrinsics.NAMES:
            assert node.id in names, f"{op.name}: template {text!r} reads unknown name {node.id!r}"
    return compile(tree, f"<template of {op.name}>", "eval")


def compute_dtype(op, inputs, out_dtype):
    """The dtype the op computes in: its result's, or for comparisons the inputs' result type."""
    if op.promote in ("common", "float", "integer"):
        return out_dtype
    if op.promote == "compare":
        metas = to_meta(list(inputs.values())[op.promote_from:], "cpu")
        return promoted_meta(op.name, *metas).dtype
    return None  # bool and keep: inputs as they are


def promoted(value, dtype):
    """``value`` as the op's impl sees it: arrays cast to the compute dtype, numbers as they are."""
    if dtype is not None and isinstance(value, np.ndarray):
        return value.astype(dtype.np)
    return value


@pytest.mark.parametrize("c", ELEMENTWISE_CASES, ids=repr)
def test_template_matches_eager(c, rng):
    op = get_op(c.op)
    args, kwargs = c.make(rng)
    # NOTE: the eager op runs on copies: inplace=True cases write into their input.
    eager = op(*to_fxkit(copy.deepcopy(args), "cpu"), **to_fxkit(copy.deepcopy(kwargs), "cpu"))
    out_dtype = op.shape_rule(*to_meta(args, "cpu"), **to_meta(kwargs, "cpu")).dtype
    inputs, options = bind(op, args, kwargs)
    dtype = compute_dtype(op, inputs, out_dtype)
    inputs = {k: (v if i < op.promote_from else promoted(v, dtype)) for i, (k, v) in enumerate(inputs.items())}
    options = {k: promoted(v, dtype) for k, v in options.items()}
    text = template_text(op, options)
    code = check_syntax(op, text, set(inputs) | set(options))
    with np.errstate(all="ignore"):  # the eager op decides what warns; here only values count
        got = eval(code, {"__builtins__": {}}, {**intrinsics.NUMPY, **inputs, **options})  # noqa: S307
    got = np.broadcast_to(np.asarray(got), eager.shape).astype(eager.dtype.np)
    tolerance = 2e-3 if eager.dtype in (fxkit.float16, fxkit.bfloat16) else max(c.rtol, 1e-6)
    if eager.dtype.is_floating_point:
        np.testing.assert_allclose(got, eager.numpy(), rtol=tolerance, atol=max(c.atol, tolerance / 10),
                                   equal_nan=True, err_msg=f"{c!r}: template {text!r}")
    else:
        np.testing.assert_array_equal(got, eager.numpy(), err_msg=f"{c!r}: template {text!r}")


def test_check_syntax_rejects_what_kernels_cannot_translate():
    add = get_op("add")
    with pytest.raises(AssertionError, match="calls something other than an intrinsic"):
        check_syntax(add, "print(a)", {"a"})
    with pytest.raises(AssertionError, match="uses Attribute"):
        check_syntax(add, "a.real + b", {"a", "b"})
    with pytest.raises(AssertionError, match="unknown name 'd'"):
        check_syntax(add, "a + d", {"a"})
