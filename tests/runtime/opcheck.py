"""The op test harness: every registered op has cases here, each checked against
a float64 numpy reference (or PyTorch), plus its shape rule against the result.

A case module (``tests/runtime/cases/*.py``) calls `case(...)`:

    case("add", lambda r: ((randf(r, 3, 4), randf(r, 4)), {}),
         lambda a, b: a + b)

``make(rng)`` returns ``(args, kwargs)`` with numpy arrays where tensors go;
``reference(*args, **kwargs)`` gets the same values with floating arrays
upcast to float64 and returns the expected result (array, scalar, or a
tuple/list of them). The runner checks values, the output dtype (``dtype=``,
default: float inputs keep their dtype) and that ``op.shape_rule`` predicts
the output's shape and dtype.
"""
import dataclasses
import importlib
import pkgutil
from typing import Any, Callable

import numpy as np

import fxkit
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op

CASES = []


@dataclasses.dataclass
class Case:
    op: str
    make: Callable
    reference: Callable
    id: str
    rtol: float = 1e-5
    atol: float = 1e-6
    dtype: Any = None  # expected output dtype (fxkit dtype), or None: checked against the reference kind
    check_rule: bool = True
    mutates: bool = False  # the op writes into its first argument; compare that instead of the return
    factory: bool = False  # the op makes a tensor from no tensor: the case's device is passed as device=
    check: Callable = None  # for random ops: check(numpy_output) asserts properties instead of a reference

    def __repr__(self):
        return f"{self.op}-{self.id}"


def case(op, make, reference, id="basic", **options):
    """Register a test case for the op named ``op``."""
    CASES.append(Case(op, make, reference, id, **options))


def randf(rng, *shape, dtype=np.float32):
    """Random floats in [-2, 2) of ``shape`` (never zeros or constants)."""
    return (rng.random(shape) * 4 - 2).astype(dtype)


def randpos(rng, *shape, dtype=np.float32):
    """Random floats in [0.1, 2.1), for log/sqrt/reciprocal."""
    return (rng.random(shape) * 2 + 0.1).astype(dtype)


def randi(rng, *shape, low=-5, high=5, dtype=np.int64):
    return rng.integers(low, high, size=shape).astype(dtype)


def load_all_cases():
    """Import every case module so CASES is complete."""
    import tests.runtime.cases as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"tests.runtime.cases.{info.name}")
    return CASES


def to_fxkit(value, device):
    if isinstance(value, np.ndarray):
        t = fxkit.from_numpy(value)
        return t if device == "cpu" else t.to(device)
    if isinstance(value, tuple):
        return tuple(to_fxkit(v, device) for v in value)
    if isinstance(value, list):
        return [to_fxkit(v, device) for v in value]
    if isinstance(value, dict):
        return {k: to_fxkit(v, device) for k, v in value.items()}
    return value


def to_meta(value, device):
    if isinstance(value, np.ndarray):
        return TensorMeta(value.shape, fxkit.runtime.dtypes.from_numpy(value.dtype), fxkit.Device(device))
    if isinstance(value, tuple):
        return tuple(to_meta(v, device) for v in value)
    if isinstance(value, list):
        return [to_meta(v, device) for v in value]
    if isinstance(value, dict):
        return {k: to_meta(v, device) for k, v in value.items()}
    return value


def to_reference(value):
    """float64 copies of floating arrays; other values unchanged (copied)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64) if value.dtype.kind == "f" else value.copy()
    if isinstance(value, tuple):
        return tuple(to_reference(v) for v in value)
    if isinstance(value, list):
        return [to_reference(v) for v in value]
    if isinstance(value, dict):
        return {k: to_reference(v) for k, v in value.items()}
    return value


def run_case(c, device, rng):
    """Run case ``c`` on ``device``; assert value, dtype and shape rule."""
    op = get_op(c.op)
    args, kwargs = c.make(rng)
    # NOTE: the reference sees the inputs before the op runs: some ops write into them.
    expected = None if c.check is not None else c.reference(*to_reference(args), **to_reference(kwargs))
    fx_args, fx_kwargs = to_fxkit(args, device), to_fxkit(kwargs, device)
    if c.factory:
        fx_kwargs["device"] = device
    out = op(*fx_args, **fx_kwargs)
    if c.mutates:
        out = fx_args[0]
    if c.check is not None:
        assert isinstance(out, fxkit.Tensor) and str(out.device) == str(fxkit.Device(device)), repr(c)
        if c.dtype is not None:
            assert out.dtype is c.dtype, f"{c!r}: dtype {out.dtype} != expected {c.dtype}"
        c.check(out.cpu().numpy())
    else:
        compare(c, out, expected, _input_float_dtype(args))
    if c.check_rule:
        meta_kwargs = to_meta(kwargs, device)
        if c.factory:
            meta_kwargs["device"] = device
        predicted = op.shape_rule(*to_meta(args, device), **meta_kwargs)
        compare_meta(c, predicted, out)


def _input_float_dtype(args):
    for a in _flatten(args):
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            return fxkit.runtime.dtypes.from_numpy(a.dtype)
    return None


def _flatten(value):
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _flatten(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flatten(v)
    else:
        yield value


def compare(c, out, expected, float_dtype):
    if isinstance(expected, (tuple, list)):
        assert isinstance(out, (tuple, list)), f"{c!r}: expected a sequence, got {type(out).__name__}"
        assert len(out) == len(expected), f"{c!r}: expected {len(expected)} outputs, got {len(out)}"
        for o, e in zip(out, expected):
            compare(c, o, e, float_dtype)
        return
    if not isinstance(out, fxkit.Tensor):
        assert out == expected, f"{c!r}: expected {expected!r}, got {out!r}"
        return
    expected = np.asarray(expected)
    got = out.cpu().numpy()
    assert got.shape == expected.shape, f"{c!r}: shape {got.shape} != expected {expected.shape}"
    if c.dtype is not None:
        want = c.dtype
    elif expected.dtype.kind == "f":
        want = float_dtype or fxkit.float32
    else:
        want = fxkit.runtime.dtypes.from_numpy(expected.dtype)
    assert out.dtype is want, f"{c!r}: dtype {out.dtype} != expected {want}"
    if expected.dtype.kind == "f" or got.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=c.rtol, atol=c.atol,
                                   err_msg=repr(c), equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected, err_msg=repr(c))


def compare_meta(c, predicted, out):
    if isinstance(out, (tuple, list)):
        assert isinstance(predicted, (tuple, list)) and len(predicted) == len(out), (
            f"{c!r}: shape rule gave {predicted!r} for {len(out)} outputs")
        for p, o in zip(predicted, out):
            compare_meta(c, p, o)
        return
    if not isinstance(out, fxkit.Tensor):
        return
    assert isinstance(predicted, TensorMeta), f"{c!r}: shape rule returned {predicted!r}"
    assert tuple(predicted.shape) == tuple(out.shape), (
        f"{c!r}: shape rule predicted {predicted.shape}, op produced {out.shape}")
    assert predicted.dtype is out.dtype, f"{c!r}: shape rule predicted {predicted.dtype}, op produced {out.dtype}"
    assert predicted.device is out.device, f"{c!r}: shape rule predicted {predicted.device}, op produced {out.device}"


def torch_ref(fn):
    """Wrap ``fn(*torch_args, **torch_kwargs)`` as a reference: numpy arrays become
    float64 (or integer/bool) torch tensors and the result comes back as numpy.
    A case using it is skipped when PyTorch is not installed; every op must
    also have at least one numpy-reference case so coverage holds without torch."""

    def reference(*args, **kwargs):
        import pytest

        torch = pytest.importorskip("torch")

        def conv(v):
            if isinstance(v, np.ndarray):
                return torch.from_numpy(np.array(v, order="C"))  # ascontiguousarray makes 0-d 1-d
            if isinstance(v, tuple):
                return tuple(conv(x) for x in v)
            if isinstance(v, list):
                return [conv(x) for x in v]
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            return v

        def back(v):
            if isinstance(v, torch.Tensor):
                return v.detach().numpy()
            if isinstance(v, (tuple, list)):
                return type(v)(back(x) for x in v) if not hasattr(v, "_fields") else tuple(back(x) for x in v)
            return v

        with torch.no_grad():
            return back(fn(*conv(args), **conv(kwargs)))

    return reference
