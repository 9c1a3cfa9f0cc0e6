"""bfloat16 against PyTorch: every op case with float32 inputs, rerun in bfloat16.

Each case of tests/runtime/cases whose inputs hold float32 arrays runs again
with those arrays cast to bfloat16, in fxkit and in PyTorch (the same call on
``torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)``): the result
dtypes must be PyTorch's, the values agree within bfloat16's precision, and
the op's shape rule must predict the result. PyTorch computes bfloat16 ops in
float32 and rounds once; so must fxkit, whatever numpy/ml_dtypes would do.
"""
import operator
import warnings

import numpy as np
import pytest

import fxkit
from fxkit.runtime.registry import get_op
from tests.runtime.bad_inputs import TIE_ORDER_UNSPECIFIED
from tests.runtime.opcheck import Case, compare_meta, load_all_cases, to_fxkit, to_meta, to_reference

torch = pytest.importorskip("torch")
if fxkit.bfloat16 is None:
    pytest.skip("bfloat16 needs the ml_dtypes package", allow_module_level=True)

F = torch.nn.functional
BF16 = fxkit.bfloat16.np
RTOL = 1e-2  # bfloat16 keeps 8 significant bits: one rounding is 0.4% at most

# Cases PyTorch refuses for bfloat16 on CPU (the test checks it still does), with the reason:
# fxkit computes them in float32, checked against the case's float64 numpy reference.
NO_TORCH_BFLOAT16 = {
    "norm-nuc": "torch.linalg.matrix_norm: Low precision dtypes not supported",
    "norm-torch_nuc_keepdim": "torch.linalg.matrix_norm: Low precision dtypes not supported",
    "avg_pool3d-torch": "F.avg_pool3d: \"avg_pool3d_out_frame\" not implemented for 'BFloat16'",
    "avg_pool3d-stride-pad-ceil-no-pad-count-torch":
        "F.avg_pool3d: \"avg_pool3d_out_frame\" not implemented for 'BFloat16'",
}
# Ops skipped, with the reason.
SKIPPED_OPS = {
    "quantize_affine": "quantization takes float32 scales by definition; PyTorch has no bfloat16 counterpart",
    "dequantize_affine": "quantization takes float32 scales by definition; PyTorch has no bfloat16 counterpart",
    "quantized_dynamic_linear": "dynamic int8 quantizes float32 activations; PyTorch's dynamic linear has no "
                                "bfloat16 counterpart",
}
# Ops whose values are not defined: only dtype and shape are compared.
UNDEFINED_VALUES = {"empty_like"}


def _torch_adjoint(grad, shape, index):
    x = torch.zeros(shape, dtype=grad.dtype, requires_grad=True)
    with torch.enable_grad():
        x[index].backward(grad)
    return x.grad


def _batch_norm_training_backward(grad, x, weight=None, eps=1e-5):
    x = x.clone().requires_grad_()
    w = (torch.ones(x.shape[1], dtype=x.dtype) if weight is None else weight.clone()).requires_grad_()
    b = torch.zeros(x.shape[1], dtype=x.dtype, requires_grad=True)
    with torch.enable_grad():
        return torch.autograd.grad(F.batch_norm(x, None, None, w, b, training=True, eps=eps), (x, w, b), grad)


def _nll_loss_backward(grad, target, input_shape, weight=None, ignore_index=-100, reduction="mean"):
    x = torch.zeros(input_shape, dtype=grad.dtype, requires_grad=True)
    with torch.enable_grad():
        loss = F.nll_loss(x, target, weight, ignore_index=ignore_index, reduction=reduction)
        return torch.autograd.grad(loss, x, grad)[0]


def _max_pool2d_with_indices_backward(grad, input_shape, kernel_size, stride, padding, dilation, ceil_mode,
                                      indices):
    return torch.ops.aten.max_pool2d_with_indices_backward(grad, torch.zeros(input_shape, dtype=grad.dtype),
                                                           kernel_size, stride, padding, dilation, ceil_mode, indices)


def _layer_norm(x, normalized_shape, *args, **kwargs):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    return F.layer_norm(x, shape, *args, **kwargs)


def _clamp(x, min=None, max=None):  # noqa: A002
    # PyTorch's clamp takes numbers or tensors for both bounds, not one of each.
    if isinstance(min, torch.Tensor) or isinstance(max, torch.Tensor):
        min, max = (torch.tensor(v) if isinstance(v, (int, float)) else v for v in (min, max))
    return torch.clamp(x, min, max)


# The PyTorch call for an fxkit op, where it is not ``Tensor.<name>``, ``F.<name>`` or ``torch.<name>``.
TORCH_CALLS = {
    "getitem": operator.getitem,
    "setitem": operator.setitem,
    "where": torch.where,
    "clamp": _clamp,
    "layer_norm": _layer_norm,
    "rms_norm": lambda x, normalized_shape, *args, **kwargs: F.rms_norm(
        x, [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape), *args, **kwargs),
    "getitem_backward": _torch_adjoint,
    "batch_norm_training_backward": _batch_norm_training_backward,
    "nll_loss_backward": _nll_loss_backward,
    "max_pool2d_with_indices_backward": _max_pool2d_with_indices_backward,
    "threshold_backward": torch.ops.aten.threshold_backward,
    "numpy_T": lambda a: a.T,
    # the op takes the weight's rank: a 5-D weight size is conv3d's weight gradient
    "conv2d_weight_grad": lambda x, weight_size, *args, **kwargs: (
        torch.nn.grad.conv3d_weight if len(weight_size) == 5 else torch.nn.grad.conv2d_weight)(
        x, weight_size, *args, **kwargs),
}


def _has_float32(value):
    if isinstance(value, np.ndarray):
        return value.dtype == np.float32
    if isinstance(value, (tuple, list)):
        return any(_has_float32(v) for v in value)
    if isinstance(value, dict):
        return any(_has_float32(v) for v in value.values())
    return False


def _bfloat16_cases():
    """Every case with a float32 array among its inputs."""
    selected = []
    for c in load_all_cases():
        if not _has_float32(c.make(np.random.default_rng(0))):
            continue
        marks = []
        if c.op in SKIPPED_OPS:
            marks.append(pytest.mark.skip(reason=SKIPPED_OPS[c.op]))
        selected.append(pytest.param(c, id=repr(c), marks=marks))
    return selected


def _cast(value):
    """``value`` with its float32 arrays as bfloat16."""
    if isinstance(value, np.ndarray):
        if value.dtype == np.float32:
            return value.astype(BF16)
        return value
    if isinstance(value, tuple):
        return tuple(_cast(v) for v in value)
    if isinstance(value, list):
        return [_cast(v) for v in value]
    if isinstance(value, dict):
        return {k: _cast(v) for k, v in value.items()}
    return value


def _widened(value):
    """bfloat16 arrays as float32, for the numpy references (which upcast float32 to float64)."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float32) if value.dtype == BF16 else value
    if isinstance(value, (tuple, list)):
        return type(value)(_widened(v) for v in value)
    if isinstance(value, dict):
        return {k: _widened(v) for k, v in value.items()}
    return value


def _to_torch(value, dtype):
    """``value`` for PyTorch: arrays as tensors, the bfloat16 ones as ``dtype``; dtypes as PyTorch's."""
    if isinstance(value, np.ndarray):
        if value.dtype == BF16:
            return torch.from_numpy(value.astype(np.float32)).to(dtype)
        return torch.from_numpy(np.array(value, order="C"))
    if isinstance(value, fxkit.DType):
        return getattr(torch, value.name)
    if isinstance(value, tuple):
        return tuple(_to_torch(v, dtype) for v in value)
    if isinstance(value, list):
        return [_to_torch(v, dtype) for v in value]
    if isinstance(value, dict):
        return {k: _to_torch(v, dtype) for k, v in value.items()}
    return value


def _torch_result(c, args, kwargs, dtype):
    """PyTorch's result of case ``c`` with its bfloat16 inputs as ``dtype`` (the written input
    for an in-place op), and PyTorch's arguments after the call."""
    t_args, t_kwargs = _to_torch(args, dtype), _to_torch(kwargs, dtype)
    out = _call_torch(c.op, t_args, t_kwargs)
    return (t_args[0] if c.mutates else out), t_args


def _rounded_like(wide, expected):
    """PyTorch's float32 result ``wide`` rounded to bfloat16 where its bfloat16 result ``expected`` is."""
    if isinstance(expected, (tuple, list)):
        return [_rounded_like(w, e) for w, e in zip(wide, expected)]
    if isinstance(expected, torch.Tensor) and expected.dtype == torch.bfloat16:
        return wide.to(torch.bfloat16)
    return wide


def _call_torch(name, args, kwargs):
    """PyTorch's result of the op ``name``; a leading number (``2.5 - x``) becomes a 0-d tensor."""
    candidates = [TORCH_CALLS.get(name)] + [getattr(ns, name, None) for ns in (torch.Tensor, F, torch)]
    if args and type(args[0]) in (int, float):
        args = (torch.tensor(args[0]),) + tuple(args[1:])
    error = None
    for fn in (f for f in candidates if f is not None):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn(*args, **kwargs)
        except TypeError as exc:  # a spelling this function does not take: try the next
            error = exc
    raise AssertionError(f"no PyTorch call matches {name}: {error}")


def _expect(c, out, expected, path="out"):
    """Assert fxkit's ``out`` has PyTorch's (or the reference's) dtype, shape and values."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(out, (tuple, list)) and len(out) == len(expected), f"{c!r}: {path} is {out!r}"
        for i, (o, e) in enumerate(zip(out, expected)):
            _expect(c, o, e, f"{path}[{i}]")
        return
    if isinstance(expected, torch.Tensor):
        want_dtype = str(expected.dtype).replace("torch.", "")
        expected = expected.detach().to(torch.float64 if expected.is_floating_point() else expected.dtype).numpy()
    elif isinstance(expected, (np.ndarray, np.generic)) and np.asarray(expected).dtype.kind == "f":
        want_dtype = "bfloat16"
    elif isinstance(expected, (np.ndarray, np.generic)):
        want_dtype = np.asarray(expected).dtype.name
    else:
        assert out == expected, f"{c!r}: {path} is {out!r}, expected {expected!r}"
        return
    assert isinstance(out, fxkit.Tensor), f"{c!r}: {path} is {type(out).__name__}, expected a tensor"
    assert out.dtype.name == want_dtype, f"{c!r}: {path} dtype {out.dtype.name} != PyTorch's {want_dtype}"
    got = out.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"{c!r}: {path} shape {got.shape} != {expected.shape}"
    if c.op in UNDEFINED_VALUES or c.check is not None:
        return
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, expected, err_msg=f"{c!r}: {path}")
        return
    finite = np.abs(expected[np.isfinite(expected)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=RTOL, atol=RTOL * scale,
                               equal_nan=True, err_msg=f"{c!r}: {path}")


def _run(c, rng):
    """Run case ``c`` with its float32 inputs as bfloat16, in fxkit and in PyTorch, and compare."""
    op = get_op(c.op)
    args, kwargs = c.make(rng)
    args, kwargs = _cast(args), _cast(kwargs)
    if repr(c) in NO_TORCH_BFLOAT16:
        with pytest.raises(RuntimeError, match=NO_TORCH_BFLOAT16[repr(c)].split(": ")[1]):
            _torch_result(c, args, kwargs, torch.bfloat16)
        t_args, expected = None, c.reference(*to_reference(_widened(args)), **to_reference(_widened(kwargs)))
    else:
        expected, t_args = _torch_result(c, args, kwargs, torch.bfloat16)
    fx_args, fx_kwargs = to_fxkit(args, "cpu"), to_fxkit(kwargs, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = op(*fx_args, **fx_kwargs)
    result = fx_args[0] if c.mutates else out
    if c.op in TIE_ORDER_UNSPECIFIED and result[0].ndim:
        # bfloat16 rounding makes ties, whose order PyTorch's topk leaves open: the values must match,
        # and each index must pick its value
        _expect(c, result[0], expected[0], "out.values")
        bound = get_op(c.op).bind(fx_args, fx_kwargs)
        picked = np.take_along_axis(bound["input"].numpy(), result[1].numpy(), bound["dim"])
        np.testing.assert_array_equal(picked.astype(np.float32), result[0].numpy().astype(np.float32), err_msg=repr(c))
        expected = None
    try:
        if expected is not None:
            _expect(c, result, expected)
    except AssertionError:
        if t_args is None:
            raise
        # A few PyTorch CPU kernels compute in bfloat16 steps (nll_loss's sums, div's floor mode
        # with rounded intermediates); fxkit computes in float32 and rounds once: PyTorch's float32 result
        # rounded to bfloat16 is the other acceptable answer (with the same dtypes).
        wide, _ = _torch_result(c, args, kwargs, torch.float32)
        _expect(c, result, _rounded_like(wide, expected))
    if c.check_rule:
        compare_meta(c, op.shape_rule(*to_meta(args, "cpu"), **to_meta(kwargs, "cpu")), out)
    return fx_args, t_args


@pytest.mark.parametrize("c", _bfloat16_cases())
def test_bfloat16_matches_torch(c, rng):
    _run(c, rng)


def _positive(rng, *shape):
    """Floats in [0.5, 1.5): their sums grow, so bfloat16 accumulation would stall."""
    return (rng.random(shape) + 0.5).astype(np.float32)


def _offset(rng, *shape):
    """Floats in [2, 6): a mean far from zero, which a bfloat16 mean would get wrong."""
    return (rng.random(shape) * 4 + 2).astype(np.float32)


_N = 4096
# Long reductions, where accumulating in bfloat16 (numpy's way) is far off and PyTorch's
# float32 accumulation is not: each is (op, make(rng) -> (args, kwargs)).
LONG_REDUCTIONS = [
    ("sum", lambda r: ((_positive(r, 3, _N),), {"dim": 1})),
    ("sum", lambda r: ((_positive(r, 16, 256),), {})),
    ("mean", lambda r: ((_positive(r, _N, 3),), {"dim": 0})),
    ("cumsum", lambda r: ((_positive(r, 2, _N), 1), {})),
    ("var", lambda r: ((_offset(r, 3, _N),), {"dim": 1})),
    ("std", lambda r: ((_offset(r, _N),), {})),
    ("norm", lambda r: ((_positive(r, 3, _N),), {"dim": 1})),
    ("softmax", lambda r: ((_offset(r, 2, _N), 1), {})),
    ("log_softmax", lambda r: ((_offset(r, 2, _N), 1), {})),
    ("logsumexp", lambda r: ((_offset(r, 2, _N), 1), {})),
    ("matmul", lambda r: ((_positive(r, 3, _N), _positive(r, _N, 2)), {})),
    ("linear", lambda r: ((_positive(r, 3, _N), _positive(r, 2, _N), _positive(r, 2)), {})),
    ("einsum", lambda r: (("ij,jk->ik", _positive(r, 3, _N), _positive(r, _N, 2)), {})),
    ("conv2d", lambda r: ((_positive(r, 1, 512, 5, 5), _positive(r, 2, 512, 3, 3)), {})),
    ("adaptive_avg_pool2d", lambda r: ((_offset(r, 1, 2, 64, 64), 1), {})),
    ("layer_norm", lambda r: ((_offset(r, 2, _N), (_N,)), {})),
    ("group_norm", lambda r: ((_offset(r, 2, 4, 32, 32), 2), {})),
    ("batch_norm", lambda r: ((_offset(r, 64, 3, 8, 8), _positive(r, 3), _positive(r, 3)), {"training": True})),
    ("mse_loss", lambda r: ((_offset(r, _N), _positive(r, _N)), {})),
    ("cross_entropy", lambda r: ((_offset(r, _N, 3), r.integers(0, 3, _N)), {})),
]


@pytest.mark.parametrize("c", [Case(name, make, None, f"long{i}") for i, (name, make) in enumerate(LONG_REDUCTIONS)],
                         ids=repr)
def test_bfloat16_accumulates_in_float32(c, rng):
    fx_args, t_args = _run(c, rng)
    if c.op == "batch_norm":  # the running statistics are updated in place, in bfloat16
        for fx_stat, t_stat in zip(fx_args[1:3], t_args[1:3]):
            _expect(c, fx_stat, t_stat, "running statistic")


def test_dropout_keeps_bfloat16(rng):
    x = fxkit.from_numpy(_positive(rng, 64, 64).astype(BF16))
    for op in (fxkit.ops.dropout, fxkit.ops.dropout2d):
        out = op(x, 0.5, training=True)
        assert out.dtype is fxkit.bfloat16
        kept = out.numpy() != 0
        assert 0 < kept.mean() < 1
        np.testing.assert_array_equal(out.numpy()[kept], (x.numpy() * BF16.type(2.0))[kept])


def test_bfloat16_parameters_require_grad():
    # torch.nn.Conv2d(..., dtype=torch.bfloat16) has bfloat16 parameters that require gradients;
    # ml_dtypes' bfloat16 is no numpy float kind, which must not make fxkit refuse them.
    conv = fxkit.nn.Conv2d(3, 4, 3, dtype=fxkit.bfloat16)
    assert conv.weight.dtype is fxkit.bfloat16 and conv.weight.requires_grad
