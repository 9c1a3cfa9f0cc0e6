"""Ops that assemble or rearrange data into a new tensor: cat, stack, repeat,
tile, flip, roll and ``pad`` (``torch.nn.functional.pad``).

Unlike the views of ``shape_ops.py`` these always copy, as in PyTorch (numpy's
``flip`` is a negative-stride view; PyTorch's is a contiguous copy, and
later ``view`` calls depend on that layout).
"""
from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import int_arg, normalize_dim, normalize_dims
from fxkit.runtime.ops.shape_ops import positional_or_keyword, shape_arg
from fxkit.runtime.tensor import Tensor

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _differ(x, y):
    return type(x) is int and type(y) is int and x != y


def _dtype_of(a):
    return a.dtype if isinstance(a, TensorMeta) else _dt.from_numpy(a.dtype)


def common_dtype(name, tensors):
    """PyTorch's result dtype over a list of tensors (arrays or metas), for cat and stack."""
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ShapeError(f"{name}: expected a non-empty list of tensors, got {tensors!r}")
    if any(isinstance(a, Tensor) or not hasattr(a, "dtype") for a in tensors):
        # dispatch unwraps a positional list only when all of it is tensors; the rest arrive as given
        other = next((a for a in tensors if not isinstance(a, Tensor)), None)
        if other is None:
            raise DTypeError(f"{name}: pass the list of tensors positionally, as in {name}([a, b], dim=0)")
        raise DTypeError(f"{name}: expected a sequence of tensors, found {type(other).__name__} in it")
    dtype = None
    for a in tensors:
        d = _dtype_of(a)
        dtype = d if dtype is None else _dt.promote_types(dtype, d)
    return dtype


def _cast_all(arrays, dtype):
    np_dtype = dtype.np
    return [a if a.dtype == np_dtype else a.astype(np_dtype) for a in arrays]


def cat_layout(shapes, dim):
    """The axis, the output shape and the positions of the inputs that take part.

    Like PyTorch, 1-d empty tensors (shape ``(0,)``) are skipped whatever the
    other inputs' rank, so ``torch.cat([torch.empty(0), x])`` works."""
    for i, s in enumerate(shapes):
        if not s:
            raise ShapeError(f"cat: zero-dimensional tensor (at position {i}) cannot be concatenated; "
                             f"unsqueeze it first")
    kept = [i for i, s in enumerate(shapes) if not (len(s) == 1 and type(s[0]) is int and s[0] == 0)]
    if not kept:
        return 0, (0,), kept
    first = kept[0]
    ref = tuple(shapes[first])
    d = normalize_dim(dim, len(ref), "cat")
    total = ref[d]
    for i in kept[1:]:
        s = tuple(shapes[i])
        if len(s) != len(ref):
            raise ShapeError(f"cat: tensors must have the same number of dimensions: tensor {first} has shape "
                             f"{list(ref)} but tensor {i} has shape {list(s)}")
        for j, (x, y) in enumerate(zip(ref, s)):
            if j != d and _differ(x, y):
                raise ShapeError(f"cat: sizes of tensors must match except in dimension {d}: tensor {first} has "
                                 f"shape {list(ref)} but tensor {i} has shape {list(s)} (dimension {j}: {x} vs {y})")
        total = total + s[d]
    return d, ref[:d] + (total,) + ref[d + 1:], kept


def _cat_rule(tensors, dim=0):
    dtype = common_dtype("cat", tensors)
    _, shape, _ = cat_layout([t.shape for t in tensors], dim)
    return TensorMeta(shape, dtype, tensors[0].device)


@op("cat", kind="other", shape_rule=_cat_rule, method=False)
def cat(xp, tensors, dim=0):
    """Tensors joined along an existing dimension; dtypes promote like PyTorch."""
    dtype = common_dtype("cat", tensors)
    d, shape, kept = cat_layout([t.shape for t in tensors], dim)
    if not kept:
        return xp.empty(shape, dtype=dtype.np)
    return xp.concatenate(_cast_all([tensors[i] for i in kept], dtype), axis=d)


def stack_layout(shapes, dim):
    """The new axis and the output shape of ``stack``; every input must have one shape."""
    ref = tuple(shapes[0])
    for i, s in enumerate(shapes[1:], 1):
        if len(s) != len(ref) or any(_differ(x, y) for x, y in zip(ref, s)):
            raise ShapeError(f"stack: expects each tensor to be equal size, but got {list(ref)} at entry 0 and "
                             f"{list(s)} at entry {i}")
    d = normalize_dim(dim, len(ref) + 1, "stack")
    return d, ref[:d] + (len(shapes),) + ref[d:]


def _stack_rule(tensors, dim=0):
    dtype = common_dtype("stack", tensors)
    _, shape = stack_layout([t.shape for t in tensors], dim)
    return TensorMeta(shape, dtype, tensors[0].device)


@op("stack", kind="other", shape_rule=_stack_rule, method=False)
def stack(xp, tensors, dim=0):
    """Equal-shaped tensors joined along a new dimension ``dim``."""
    dtype = common_dtype("stack", tensors)
    d, _ = stack_layout([t.shape for t in tensors], dim)
    return xp.stack(_cast_all(tensors, dtype), axis=d)


def _repeat_shape(shape, sizes, name="repeat"):
    if len(sizes) < len(shape):
        raise ShapeError(f"{name}: the number of repeat dims ({len(sizes)}) can not be smaller than the number of "
                         f"dimensions of the tensor ({len(shape)}); got {list(sizes)} for shape {list(shape)}")
    for s in sizes:
        if type(s) is int and s < 0:
            raise ShapeError(f"{name}: repeats must be non-negative, got {list(sizes)}")
    shape = (1,) * (len(sizes) - len(shape)) + tuple(shape)
    return tuple(n * r for n, r in zip(shape, sizes))


def _repeat_sizes(sizes, repeats):
    return shape_arg(positional_or_keyword(sizes, repeats, "repeat", "repeats"), "repeat")


def _repeat_rule(input, *sizes, repeats=None):  # noqa: A002
    return TensorMeta(_repeat_shape(input.shape, _repeat_sizes(sizes, repeats)), input.dtype, input.device)


@op("repeat", kind="other", shape_rule=_repeat_rule)
def repeat(xp, input, *sizes, repeats=None):  # noqa: A002
    """The data copied ``sizes[i]`` times along each dimension (new leading dims allowed);
    ``x.repeat(2, 3)`` or ``x.repeat(repeats=(2, 3))``."""
    sizes = _repeat_sizes(sizes, repeats)
    _repeat_shape(input.shape, sizes)
    return xp.tile(input, sizes)


def _tile_sizes(shape, args, dims):
    dims = shape_arg(positional_or_keyword(args, dims, "tile", "dims"), "tile")
    return (1,) * (len(shape) - len(dims)) + dims


def _tile_rule(input, *args, dims=None):  # noqa: A002
    shape = _repeat_shape(input.shape, _tile_sizes(input.shape, args, dims), "tile")
    return TensorMeta(shape, input.dtype, input.device)


@op("tile", kind="other", shape_rule=_tile_rule)
def tile(xp, input, *args, dims=None):  # noqa: A002
    """``repeat`` where fewer ``dims`` than dimensions repeat the trailing ones."""
    sizes = _tile_sizes(input.shape, args, dims)
    _repeat_shape(input.shape, sizes, "tile")
    return xp.tile(input, sizes)


def _same_rule(a):
    return TensorMeta(tuple(a.shape), a.dtype, a.device)


def _flip_axes(ndim, args, dims):
    return normalize_dims(shape_arg(positional_or_keyword(args, dims, "flip", "dims"), "flip"), ndim, "flip")


def _flip_rule(input, *args, dims=None):  # noqa: A002
    _flip_axes(len(input.shape), args, dims)
    return _same_rule(input)


@op("flip", kind="other", shape_rule=_flip_rule)
def flip(xp, input, *args, dims=None):  # noqa: A002
    """The order of elements reversed along ``dims`` (a contiguous copy, like PyTorch)."""
    axes = _flip_axes(input.ndim, args, dims)
    return xp.ascontiguousarray(xp.flip(input, axes)) if axes else input.copy()


def _roll_args(ndim, shifts, dims):
    shifts = shifts if isinstance(shifts, (tuple, list)) else (shifts,)
    shifts = [int_arg(s, "roll", "shifts") for s in shifts]
    if dims is None:
        if len(shifts) != 1:
            raise ShapeError(f"roll: shifts and dimensions must align: {len(shifts)} shifts {list(shifts)} but "
                             f"no dims; give one dim per shift")
        return shifts[0], None
    dims = dims if isinstance(dims, (tuple, list)) else (dims,)
    if len(shifts) != len(dims):
        raise ShapeError(f"roll: shifts and dimensions must align: shifts {list(shifts)}, dims {list(dims)}")
    return tuple(shifts), tuple(normalize_dim(d, ndim, "roll") for d in dims)


def _roll_rule(input, shifts, dims=None):  # noqa: A002
    _roll_args(len(input.shape), shifts, dims)
    return _same_rule(input)


@op("roll", kind="other", shape_rule=_roll_rule)
def roll(xp, input, shifts, dims=None):  # noqa: A002
    """Elements shifted cyclically along ``dims``; with no dims, over the flattened tensor."""
    shifts, axes = _roll_args(input.ndim, shifts, dims)
    return xp.roll(input, shifts, axes)


def pad_layout(shape, pad, mode, value):
    """``(dim, left, right)`` for each padded dim and the output shape.

    ``pad`` lists the last dimension's (left, right) first, as in
    ``torch.nn.functional.pad``; negative amounts crop."""
    pad = shape_arg((pad,), "pad")
    if mode not in _PAD_MODES:
        raise ShapeError(f"pad: unrecognised padding mode {mode!r}; expected one of {', '.join(_PAD_MODES)}")
    if mode != "constant" and value is not None:
        raise ShapeError(f"pad: padding mode {mode!r} doesn't take a value argument (got value={value!r})")
    if len(pad) % 2:
        raise ShapeError(f"pad: padding length must be divisible by 2, got {len(pad)} values {list(pad)}")
    if len(pad) // 2 > len(shape):
        raise ShapeError(f"pad: padding length should be less than or equal to two times the input dimension but "
                         f"got padding length {len(pad)} and input of dimension {len(shape)}")
    out = list(shape)
    plan = []
    for i in range(len(pad) // 2):
        d = len(shape) - 1 - i
        n, left, right = shape[d], pad[2 * i], pad[2 * i + 1]
        out[d] = n + left + right
        if type(n) is int:
            _check_pad(mode, shape, d, n, left, right)
        plan.append((d, left, right))
    return plan, tuple(out)


def _check_pad(mode, shape, d, n, left, right):
    where = f"padding ({left}, {right}) at dimension {d} of input {list(shape)}"
    if n + left + right < 0:
        raise ShapeError(f"pad: the output size would be negative ({n + left + right}) for {where}")
    if mode == "reflect" and (left >= n or right >= n) and (left > 0 or right > 0):
        raise ShapeError(f"pad: padding size should be less than the corresponding input dimension in reflect "
                         f"mode, but got {where}")
    if mode == "circular" and (left > 0 or right > 0) and (left > n or right > n or
                                                           n - max(-left, 0) - max(-right, 0) <= 0):
        raise ShapeError(f"pad: padding value causes wrapping around more than once in circular mode: {where}")
    if mode == "replicate" and n == 0 and (left > 0 or right > 0):
        raise ShapeError(f"pad: cannot replicate-pad an empty dimension: {where}")


def _pad_rule(input, pad, mode="constant", value=None):  # noqa: A002  (torch's parameter name)
    _, shape = pad_layout(tuple(input.shape), pad, mode, value)
    return TensorMeta(shape, input.dtype, input.device)


@op("pad", kind="other", shape_rule=_pad_rule, method=False)
def pad(xp, input, pad, mode="constant", value=None):  # noqa: A002
    """``torch.nn.functional.pad``: pad (or crop, with negative amounts) the trailing dims.

    Modes: ``constant`` (fill with ``value``, default 0), ``reflect`` (mirror without the
    edge), ``replicate`` (repeat the edge), ``circular`` (wrap around)."""
    plan, shape = pad_layout(input.shape, pad, mode, value)
    if mode == "constant":
        src = input[_slices(input.ndim, ((d, slice(max(-lo, 0), input.shape[d] - max(-hi, 0))) for d, lo, hi in plan))]
        out = xp.full(shape, 0 if value is None else value, dtype=input.dtype)
        out[_slices(input.ndim, ((d, slice(max(lo, 0), max(lo, 0) + src.shape[d])) for d, lo, _ in plan))] = src
        return out
    out = input
    for d, lo, hi in plan:
        n = input.shape[d]
        if mode == "reflect":
            idx = xp.arange(-lo, n + hi)
            idx = (n - 1) - xp.abs((n - 1) - xp.abs(idx))
        elif mode == "replicate":
            idx = xp.clip(xp.arange(-lo, n + hi), 0, n - 1)
        else:  # circular wraps around what is left after cropping, like PyTorch
            crop = max(-lo, 0)
            kept = n - crop - max(-hi, 0)
            idx = crop + xp.arange(-max(lo, 0), kept + max(hi, 0)) % kept
        out = xp.take(out, idx, axis=d)
    return out if out is not input else input.copy()


def _slices(ndim, dim_slices):
    index = [slice(None)] * ndim
    for d, s in dim_slices:
        index[d] = s
    return tuple(index)
