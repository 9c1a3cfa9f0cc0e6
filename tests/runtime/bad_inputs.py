"""Bad calls derived from the op cases, and the judge of how an op answers them.

Each registered op's opcheck cases are valid calls. `bad_calls` bends one of
them at a time: a tensor argument of the wrong rank, a bool/int/float tensor
where another kind goes, a string, None or a Python list in place of a tensor,
two tensors of mismatched shapes, a dimension out of range, a string or a float
where an int goes. `judge` runs the call and says what happened: the op either
answers like PyTorch does for the same call, or raises an fxkit error naming
the op; anything else (a raw numpy error, an AttributeError, a hang, a result
that differs from PyTorch's) is a finding.
"""
import copy
import inspect
import math
import operator
import re
import signal

import numpy as np

import fxkit
from fxkit.errors import FxkitError
from fxkit.runtime.registry import get_op
from tests.runtime.opcheck import to_fxkit

TIMEOUT_S = 5

# Parameter names through which ops take dimensions; an out-of-range value must be refused.
_DIM_PARAMS = ("dim", "dim0", "dim1", "start_dim", "end_dim", "dims")

# The PyTorch callable of an op where it is not F.<name>, torch.<name> or Tensor.<name>.
_TORCH_SPECIAL = {
    "getitem": lambda torch: operator.getitem,
    "setitem": lambda torch: _torch_setitem,
    "numpy_T": lambda torch: lambda a: a.T,
    # fxkit's unfold is Tensor.unfold (sliding windows); F.unfold is im2col, another operation
    "unfold": lambda torch: lambda a, *args, **kwargs: a.unfold(*args, **kwargs),
    **{f"math_{name}": (lambda torch, name=name: getattr(math, name))
       for name in ("sqrt", "floor", "ceil", "trunc", "exp", "log2", "log10", "fabs", "log", "pow", "gcd", "isqrt")},
}
# Ops with no PyTorch counterpart called the same way: their successes are not compared.
NO_TORCH = {"pipe_split", "quantize_affine", "dequantize_affine", "quantized_linear", "quantized_conv2d",
            "getitem_backward", "conv2d_weight_grad", "batch_norm_training_backward"}
# torch.<name> takes other arguments than the op (and F.<name>): never use it for these.
# PyTorch leaves the order of equal elements open (topk): indices are checked by the values they pick.
TIE_ORDER_UNSPECIFIED = {"topk"}
_FUNCTIONAL_ONLY = {"dropout", "dropout2d", "batch_norm", "layer_norm", "group_norm", "embedding", "instance_norm"}


def _torch_setitem(a, index, value):
    a[index] = value


def torch_callables(name):
    """PyTorch's spellings of the op ``name`` (F.<name>, torch.<name>, Tensor.<name>), best first."""
    import torch
    import torch.nn.functional as F

    if name in NO_TORCH:
        return []
    if name in _TORCH_SPECIAL:
        return [_TORCH_SPECIAL[name](torch)]
    found = []
    fn = getattr(F, name, None)
    if callable(fn):
        found.append(fn)
    fn = getattr(torch, name, None)
    if callable(fn) and not isinstance(fn, type) and name not in _FUNCTIONAL_ONLY:
        found.append(fn)
    if hasattr(torch.Tensor, name):
        found.append(lambda self, *args, **kwargs: getattr(self, name)(*args, **kwargs))
    return found


# -- mutations -----------------------------------------------------------------------------
def _where(slot):
    """``arg1``, ``arg0[2]`` or ``weight=``: a slot as findings name it."""
    if slot[0] == "arg":
        return f"arg{slot[1]}"
    if slot[0] == "item":
        return f"arg{slot[1]}[{slot[2]}]"
    return f"{slot[1]}="


def _tensor_slots(args, kwargs):
    """Where the case puts arrays: ("arg", i), ("item", i, j) inside a list, ("kw", name)."""
    slots = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            slots.append(("arg", i))
        elif isinstance(a, (list, tuple)):
            slots += [("item", i, j) for j, v in enumerate(a) if isinstance(v, np.ndarray)]
    slots += [("kw", k) for k, v in kwargs.items() if isinstance(v, np.ndarray)]
    return slots


def _get(args, kwargs, slot):
    if slot[0] == "arg":
        return args[slot[1]]
    if slot[0] == "item":
        return args[slot[1]][slot[2]]
    return kwargs[slot[1]]


def _put(args, kwargs, slot, value):
    args, kwargs = list(args), dict(kwargs)
    if slot[0] == "arg":
        args[slot[1]] = value
    elif slot[0] == "item":
        seq = list(args[slot[1]])
        seq[slot[2]] = value
        args[slot[1]] = type(args[slot[1]])(seq)
    else:
        kwargs[slot[1]] = value
    return tuple(args), kwargs


def _replacements(a):
    """Wrong stand-ins for the array ``a``: (label, value)."""
    out = [("rank+1", np.stack([a, a])), ("str", "abc"), ("none", None)]
    if a.ndim >= 1 and a.shape[0] > 0:
        out.append(("rank-1", a[0, ...].copy()))
    if a.size > 0:
        out.append(("0d", a.reshape(-1)[:1].reshape(()).copy()))
    if a.ndim and a.size > 0:  # a 0-d array's list is a number, which ops take
        out.append(("list", a.tolist()))
    if a.dtype.kind == "f":
        out += [("bool", a > 0), ("int", np.round(np.nan_to_num(a) * 3).astype(np.int64))]
    elif a.dtype.kind in "iu":
        out += [("float", a.astype(np.float32) + np.float32(0.5)), ("bool", a > 0)]
    elif a.dtype.kind == "b":
        out.append(("float", a.astype(np.float32) + np.float32(0.5)))
    # NOTE: arithmetic on 0-d arrays gives numpy scalars; the op must see arrays.
    return [(label, np.asarray(v) if isinstance(v, np.generic) else v) for label, v in out]


def _grown(a):
    """``a`` with its last dimension one longer (a shape mismatch against its partner)."""
    return np.concatenate([a, a[..., :1]], axis=-1)


def _dim_slots(op, args, kwargs):
    """(slot, value) of the dimension arguments of this call, by the impl's signature."""
    try:
        bound = inspect.signature(op.impl).bind(None, *args, **kwargs)
    except TypeError:
        return []
    positional = list(inspect.signature(op.impl).parameters)[1:]
    out = []
    for name, value in bound.arguments.items():
        if name not in _DIM_PARAMS:
            continue
        where = ("kw", name) if name in kwargs else ("arg", positional.index(name))
        out.append((where, value))
    return out


def _int_slots(args):
    """Positions of plain int arguments (sizes, dims, counts)."""
    return [i for i, a in enumerate(args) if type(a) is int]


def bad_calls(op, args, kwargs):
    """Every bad variant of one valid call: ``[(where, kind, args, kwargs)]``, ``kind``
    one of rank+1, rank-1, 0d, str, none, list, bool, int, float, mismatch, dim_high,
    dim_low, int_str, int_float, extra."""
    calls = []
    slots = _tensor_slots(args, kwargs)
    for slot in slots:
        for kind, value in _replacements(_get(args, kwargs, slot)):
            calls.append((_where(slot), kind, *_put(args, kwargs, slot, value)))
    for first, second in zip(slots, slots[1:]):
        a, b = _get(args, kwargs, first), _get(args, kwargs, second)
        if a.ndim >= 1 and b.ndim >= 1 and a.shape[-1] > 1 and b.shape[-1] > 1:
            calls.append((_where(second), "mismatch", *_put(args, kwargs, second, _grown(b))))
    ndim = max((_get(args, kwargs, s).ndim for s in slots), default=0)
    for slot, value in _dim_slots(op, args, kwargs):
        for kind, bad in (("dim_high", ndim + 2), ("dim_low", -ndim - 3)):
            if isinstance(value, (tuple, list)):
                bad = type(value)([bad] + list(value[1:]))
            elif value is not None and type(value) is not int:
                continue
            calls.append((_where(slot), kind, *_put(args, kwargs, slot, bad)))
    for i in _int_slots(args):
        for kind, bad in (("int_str", "abc"), ("int_float", 2.5)):
            calls.append((f"arg{i}", kind, *_put(args, kwargs, ("arg", i), bad)))
    if not args and not kwargs:  # an op taking nothing, given a tensor
        calls.append(("arg0", "extra", (np.ones(3, np.float32),), {}))
    return calls


# -- running and judging -----------------------------------------------------------------
class _Timeout(BaseException):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _call_fxkit(op, args, kwargs, mutates):
    """(result, None) or (None, exception) of the op on fxkit tensors, under a time limit.
    The result of an op that writes into its first argument is that argument."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        fx_args = to_fxkit(args, "cpu")
        out = op(*fx_args, **to_fxkit(kwargs, "cpu"))
        return (fx_args[0] if mutates else out), None
    except _Timeout:
        return None, TimeoutError(f"{op.name}: no answer in {TIMEOUT_S} s")
    except Exception as exc:  # noqa: BLE001 - classifying every outcome is the point
        return None, exc
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _to_torch(value):
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, order="C"))
    if isinstance(value, fxkit.runtime.dtypes.DType):
        return getattr(torch, value.name)
    if isinstance(value, fxkit.Device):
        return str(value)
    if isinstance(value, tuple):
        return tuple(_to_torch(v) for v in value)
    if isinstance(value, list):
        return [_to_torch(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_torch(v) for k, v in value.items()}
    return value


def torch_accepts(name, args, kwargs):
    """Whether PyTorch is installed and takes this call under one of the op's spellings."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return _call_torch(name, args, kwargs, False)[0]


def _call_torch(name, args, kwargs, mutates):
    """(ok, result) of PyTorch on the same call; ok False when PyTorch refuses it or has no such op."""
    import warnings

    import torch

    for fn in torch_callables(name):
        try:
            t_args, t_kwargs = _to_torch(args), _to_torch(kwargs)
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = fn(*t_args, **t_kwargs)
        except Exception:  # noqa: BLE001, S112 - a refusal by every spelling makes the call bad input
            continue
        return True, (t_args[0] if mutates or name == "setitem" else out)
    return False, None


def _same(op, got, want):
    """Whether fxkit's result equals PyTorch's (values, shape and dtype); None when it does."""
    import torch

    if isinstance(want, torch.Tensor):
        if not isinstance(got, fxkit.Tensor):
            return f"PyTorch gives a tensor, fxkit {type(got).__name__}"
        w = want.detach()
        if tuple(got.shape) != tuple(w.shape):
            return f"shape {tuple(got.shape)} != PyTorch's {tuple(w.shape)}"
        if got.dtype.name != str(w.dtype).removeprefix("torch."):
            return f"dtype {got.dtype.name} != PyTorch's {w.dtype}"
        if op.kind == "random" or op.name.startswith("empty"):
            return None  # values are random or undefined
        g, e = got.numpy().astype(np.float64), w.double().numpy()
        # NOTE: half precision rounds once more than the float32 reference path; near 0 (normalised
        # outputs) a relative tolerance alone is meaningless, so the floor is one float16 epsilon.
        rtol, atol = (2e-3, 2.0 ** -10) if got.dtype.itemsize < 4 else (1e-4, 1e-5)
        if not np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True):
            return f"values differ from PyTorch's by up to {np.nanmax(np.abs(g - e))}"
        return None
    if isinstance(want, (tuple, list)) and not isinstance(want, torch.Size):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"PyTorch gives {len(want)} results, fxkit {got!r}"
        for g, w in zip(got, want):
            problem = _same(op, g, w)
            if problem:
                return problem
        return None
    if isinstance(want, torch.Size):
        want = tuple(want)
        got = tuple(got) if isinstance(got, (tuple, list)) else got
    if got != want:
        return f"{got!r} != PyTorch's {want!r}"
    return None


def _names_op(op, exc):
    """Whether the message names the op (as a word: ``t`` is not found in ``can't``)."""
    names = {op.name, op.method} - {None}
    return any(re.search(rf"(?<![\w']){re.escape(n)}(?![\w'])", str(exc)) for n in names)


def judge(op_name, args, kwargs, mutates, torch_oracle):
    """None when the op handles this call well, else ``(category, message)``.

    Categories: ``crash`` (an exception that is no fxkit error naming the op, or a
    hang), ``garbage`` (a tensor of a dtype fxkit has no name for), ``differs`` (a
    result unlike PyTorch's) and ``refused`` (a result where PyTorch refuses the call).
    ``torch_oracle`` False: PyTorch is not installed, or refuses even the valid call this
    one was bent from (fxkit takes a spelling it does not), so it cannot judge a success."""
    op = get_op(op_name)
    # NOTE: PyTorch gets copies taken now: ops writing in place change the fxkit inputs.
    t_args, t_kwargs = copy.deepcopy((args, kwargs))
    got, exc = _call_fxkit(op, args, kwargs, mutates)
    if exc is not None:
        if isinstance(exc, FxkitError) and _names_op(op, exc):
            return None
        if type(exc) is TypeError and f"{op.impl.__name__}()" in str(exc):
            return None  # Python's own argument binding, naming the function
        return "crash", f"raised {type(exc).__module__}.{type(exc).__name__}: {str(exc)[:300]}"
    if not _valid(got):
        return "garbage", f"succeeded with an array of a dtype fxkit has no name for: {_raw(got)}"
    if op_name in NO_TORCH or not torch_oracle:
        return None
    ok, want = _call_torch(op_name, t_args, t_kwargs, mutates)
    if not ok:
        return "refused", f"succeeded ({_describe(got)}) where PyTorch refuses the call"
    if op_name in TIE_ORDER_UNSPECIFIED and isinstance(want, tuple) and len(want) == 2:
        problem = _same_up_to_ties(op, got, want, t_args, t_kwargs)
    else:
        problem = _same(op, got, want)
    return None if problem is None else ("differs", f"succeeded but {problem}")


def _same_up_to_ties(op, got, want, args, kwargs):
    """For ``(values, indices)`` results whose tie order PyTorch leaves open: the same values, and
    indices that pick those values from the input (each index may be any of its equal elements)."""
    problem = _same(op, got[0], want[0])
    if problem is not None or not isinstance(got[1], fxkit.Tensor):
        return problem
    bound = inspect.signature(op.impl).bind(None, *args, **kwargs)
    bound.apply_defaults()
    source, dim = bound.arguments["input"], bound.arguments["dim"]
    indices = got[1].numpy()
    if indices.shape != tuple(want[1].shape) or np.asarray(source).ndim == 0:
        return _same(op, got[1], want[1])
    picked = np.take_along_axis(np.asarray(source), indices, dim)
    if not np.array_equal(picked, got[0].numpy(), equal_nan=picked.dtype.kind == "f"):
        return "indices that do not pick the returned values"
    return None


def _valid(value):
    """Whether every tensor in ``value`` holds an array of an fxkit dtype."""
    if isinstance(value, fxkit.Tensor):
        return value._data.dtype in fxkit.runtime.dtypes._BY_NP
    if isinstance(value, (tuple, list)):
        return all(_valid(v) for v in value)
    return True


def _raw(value):
    if isinstance(value, fxkit.Tensor):
        return f"{value._data.dtype}{list(value.shape)}"
    if isinstance(value, (tuple, list)):
        return ", ".join(_raw(v) for v in value)
    return type(value).__name__


def _describe(value):
    if isinstance(value, fxkit.Tensor):
        return f"{value.dtype.name}{list(value.shape)}"
    return type(value).__name__
