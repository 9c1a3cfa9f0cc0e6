"""Shape and view ops: view, reshape, permute, squeeze, expand, cat, split, ...,
and the size queries ``size``, ``dim`` and ``numel``.

Views follow PyTorch: ``view`` refuses a layout it cannot alias (PyTorch's
``computeStride``), ``reshape`` copies when it must. Shape rules are written
with plain arithmetic on dims so symbolic dims pass through; checks that
need a concrete value run only when the dims are ints.
"""
import math
import numbers

from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.dims import normalize_dim, normalize_dims
from fxkit.runtime.tensor import Tensor


def is_symbolic(s):
    """True for a symbolic dim: an object with dim arithmetic that is no number, string or tensor."""
    return not isinstance(s, (numbers.Number, str, Tensor, TensorMeta)) and hasattr(s, "__floordiv__")


def shape_arg(shape, name):
    """``f(x, 2, 3)``, ``f(x, (2, 3))`` and ``f(x, [2, 3])`` all give ``(2, 3)``."""
    if len(shape) == 1 and type(shape[0]) in (tuple, list):
        shape = tuple(shape[0])
    for s in shape:
        if type(s) is not int:
            break
    else:
        return tuple(shape)
    out = []
    for s in shape:
        if isinstance(s, numbers.Integral) and not isinstance(s, bool):
            out.append(int(s))
        elif is_symbolic(s):
            out.append(s)
        else:
            raise DTypeError(f"{name}: sizes must be ints, got {s!r} in {tuple(shape)}")
    return tuple(out)


def positional_or_keyword(args, keyword, name, what):
    """The sizes of ``f(x, 2, 3)`` or ``f(x, what=(2, 3))`` (PyTorch accepts both)."""
    if keyword is None:
        return args
    if args:
        raise DTypeError(f"{name}: got {what} both as positional arguments {args} and as {what}={keyword!r}")
    return (keyword,)


def _concrete(*dims):
    return all(type(d) is int for d in dims)


def infer_view_shape(old_shape, shape, name="view"):
    """Resolve one ``-1`` in ``shape`` against ``old_shape``'s element count."""
    known = 1
    inferred = None
    for i, d in enumerate(shape):
        if type(d) is int and d < 0:
            if d != -1:
                raise ShapeError(f"{name}: invalid shape dimension {d} at index {i} of shape {list(shape)}")
            if inferred is not None:
                raise ShapeError(f"{name}: only one dimension can be inferred (-1), got {list(shape)}")
            inferred = i
        else:
            known = known * d
    numel = math.prod(old_shape)
    concrete = type(numel) is int and type(known) is int
    if inferred is not None:
        if concrete and (known == 0 or numel % known):
            raise ShapeError(f"{name}: shape {list(shape)} is invalid for input of size {numel}")
        return shape[:inferred] + (numel // known,) + shape[inferred + 1:]
    if concrete and known != numel:
        raise ShapeError(f"{name}: shape {list(shape)} is invalid for input of size {numel} "
                         f"(input shape {list(old_shape)})")
    return shape


def can_view(old_shape, old_strides, new_shape):
    """PyTorch's ``computeStride``: can ``new_shape`` alias memory laid out as
    ``old_shape``/``old_strides`` (any stride unit) without a copy?"""
    if not old_shape or math.prod(old_shape) == 0:
        return True
    view_d = len(new_shape) - 1
    chunk_base_stride = old_strides[-1]
    tensor_numel = 1
    view_numel = 1
    for tensor_d in range(len(old_shape) - 1, -1, -1):
        tensor_numel *= old_shape[tensor_d]
        if tensor_d == 0 or (old_shape[tensor_d - 1] != 1
                             and old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return False
            if tensor_d > 0:
                chunk_base_stride = old_strides[tensor_d - 1]
                tensor_numel = 1
                view_numel = 1
    return view_d == -1


def _meta(a, shape):
    return TensorMeta(tuple(shape), a.dtype, a.device)


def _view_shape(old_shape, shape, size):
    return infer_view_shape(old_shape, shape_arg(positional_or_keyword(shape, size, "view", "size"), "view"))


def _view_rule(input, *shape, size=None):  # noqa: A002
    return _meta(input, _view_shape(input.shape, shape, size))


@op("view", kind="view", shape_rule=_view_rule)
def view(xp, input, *shape, size=None):  # noqa: A002
    """The same data with another shape (``x.view(2, 3)``, ``x.view(size=(2, 3))``); ``-1`` infers
    one dimension. Never copies."""
    shape = _view_shape(input.shape, shape, size)
    if not input.flags.c_contiguous and not can_view(input.shape, input.strides, shape):
        raise ShapeError(
            f"view: view size {list(shape)} is not compatible with the input tensor's size {list(input.shape)} "
            f"and stride (at least one dimension spans across two contiguous subspaces); "
            f"use .reshape(...) instead, or call .contiguous() first")
    return input.reshape(shape)


def _reshape_shape(old_shape, sizes, shape):
    sizes = shape_arg(positional_or_keyword(sizes, shape, "reshape", "shape"), "reshape")
    return infer_view_shape(old_shape, sizes, "reshape")


def _reshape_rule(input, *sizes, shape=None):  # noqa: A002
    return _meta(input, _reshape_shape(input.shape, sizes, shape))


@op("reshape", kind="view", shape_rule=_reshape_rule)
def reshape(xp, input, *sizes, shape=None):  # noqa: A002
    """Like ``view``, but copies when the layout cannot be aliased."""
    return input.reshape(_reshape_shape(input.shape, sizes, shape))


def _permutation(ndim, args, dims):
    dims = shape_arg(positional_or_keyword(args, dims, "permute", "dims"), "permute")
    if len(dims) != ndim:
        raise ShapeError(f"permute: the number of dims {len(dims)} in {list(dims)} does not match "
                         f"the input's {ndim} dimensions; give one entry per dimension")
    axes = tuple(d if 0 <= d < ndim else normalize_dim(d, ndim, "permute") for d in dims)
    if len(set(axes)) != ndim:
        raise ShapeError(f"permute: duplicate dims are not allowed, got {list(dims)}")
    return axes


def _permute_rule(input, *args, dims=None):  # noqa: A002
    return _meta(input, (input.shape[d] for d in _permutation(len(input.shape), args, dims)))


@op("permute", kind="view", shape_rule=_permute_rule)
def permute(xp, input, *args, dims=None):  # noqa: A002
    """The dimensions reordered: ``x.permute(0, 2, 1)``."""
    return input.transpose(_permutation(input.ndim, args, dims))


def _transpose_rule(input, dim0, dim1):  # noqa: A002
    shape = list(input.shape)
    d0, d1 = normalize_dim(dim0, len(shape), "transpose"), normalize_dim(dim1, len(shape), "transpose")
    if shape:
        shape[d0], shape[d1] = shape[d1], shape[d0]
    return _meta(input, shape)


@op("transpose", kind="view", shape_rule=_transpose_rule)
def transpose(xp, input, dim0, dim1):  # noqa: A002
    """Dimensions ``dim0`` and ``dim1`` swapped."""
    d0, d1 = normalize_dim(dim0, input.ndim, "transpose"), normalize_dim(dim1, input.ndim, "transpose")
    return input if d0 == d1 else xp.swapaxes(input, d0, d1)


def _check_t(ndim):
    if ndim > 2:
        raise ShapeError(f"t: expects a tensor with <= 2 dimensions, but got {ndim}D; "
                         f"use .transpose(dim0, dim1) or .permute(...) instead")


def _t_rule(input):  # noqa: A002
    _check_t(len(input.shape))
    return _meta(input, input.shape[::-1])


@op("t", kind="view", shape_rule=_t_rule)
def t(xp, input):  # noqa: A002
    """The transpose of a matrix; 0-d and 1-d tensors come back as they are."""
    _check_t(input.ndim)
    return input.T


def _numpy_t_rule(input):  # noqa: A002
    return _meta(input, input.shape[::-1])


@op("numpy_T", kind="view", shape_rule=_numpy_t_rule, method=False)
def numpy_T(xp, input):  # noqa: N802, A002  (PyTorch's name: ``x.T`` records aten::numpy_T)
    """Every dimension reversed, as ``x.T`` does in numpy and PyTorch (0-d and 1-d as they are)."""
    return input.T


def _flatten_shape(shape, start_dim, end_dim):
    s, e = normalize_dim(start_dim, len(shape), "flatten"), normalize_dim(end_dim, len(shape), "flatten")
    if not shape:
        return (1,)
    if s > e:
        raise ShapeError(f"flatten: start_dim ({start_dim}) cannot come after end_dim ({end_dim}) "
                         f"for a tensor of {len(shape)} dimensions")
    return shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]


def _flatten_rule(input, start_dim=0, end_dim=-1):  # noqa: A002
    return _meta(input, _flatten_shape(tuple(input.shape), start_dim, end_dim))


@op("flatten", kind="view", shape_rule=_flatten_rule)
def flatten(xp, input, start_dim=0, end_dim=-1):  # noqa: A002
    """Dimensions ``start_dim..end_dim`` merged into one (a view when the layout allows)."""
    return input.reshape(_flatten_shape(input.shape, start_dim, end_dim))


def _unflatten_shape(shape, dim, sizes):
    d = normalize_dim(dim, len(shape), "unflatten")
    sizes = shape_arg((sizes,), "unflatten")
    if not sizes:
        raise ShapeError("unflatten: sizes must be non-empty")
    try:
        sizes = infer_view_shape((shape[d],), sizes, "unflatten")
    except ShapeError:
        raise ShapeError(f"unflatten: provided sizes {list(sizes)} don't multiply up to the size of "
                         f"dim {dim} ({shape[d]}) in the input tensor of shape {list(shape)}") from None
    return shape[:d] + sizes + shape[d + 1:]


def _unflatten_rule(input, dim, sizes):  # noqa: A002
    return _meta(input, _unflatten_shape(tuple(input.shape), dim, sizes))


@op("unflatten", kind="view", shape_rule=_unflatten_rule)
def unflatten(xp, input, dim, sizes):  # noqa: A002
    """Dimension ``dim`` split into ``sizes`` (one may be -1)."""
    if input.ndim == 0:
        raise ShapeError("unflatten: cannot unflatten a 0-d tensor")
    return input.reshape(_unflatten_shape(input.shape, dim, sizes))


def _unsqueeze_shape(shape, dim):
    d = normalize_dim(dim, len(shape) + 1, "unsqueeze")
    return shape[:d] + (1,) + shape[d:]


def _unsqueeze_rule(input, dim):  # noqa: A002
    return _meta(input, _unsqueeze_shape(tuple(input.shape), dim))


@op("unsqueeze", kind="view", shape_rule=_unsqueeze_rule)
def unsqueeze(xp, input, dim):  # noqa: A002
    """A size-1 dimension inserted at ``dim`` (``-1`` appends)."""
    return input.reshape(_unsqueeze_shape(input.shape, dim))


def _squeeze_shape(shape, dim):
    axes = range(len(shape)) if dim is None else normalize_dims(dim, len(shape), "squeeze") or ()
    return tuple(s for i, s in enumerate(shape) if not (i in axes and type(s) is int and s == 1))


def _squeeze_rule(input, dim=None):  # noqa: A002
    return _meta(input, _squeeze_shape(tuple(input.shape), dim))


@op("squeeze", kind="view", shape_rule=_squeeze_rule)
def squeeze(xp, input, dim=None):  # noqa: A002
    """Size-1 dimensions removed: all of them, or those among ``dim`` (an int or a tuple)."""
    return input.reshape(_squeeze_shape(input.shape, dim))


def _expand_shape(shape, sizes):
    sizes = shape_arg(sizes, "expand")
    lead = len(sizes) - len(shape)
    if lead < 0:
        raise ShapeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to "
                         f"the number of dimensions in the tensor ({len(shape)}); sizes {list(sizes)}, "
                         f"tensor shape {list(shape)}")
    out = []
    for i, s in enumerate(sizes):
        if i < lead:
            if type(s) is int and s < 0:
                raise ShapeError(f"expand: the expanded size {s} isn't allowed in a leading, non-existing "
                                 f"dimension {i}; sizes {list(sizes)}, tensor shape {list(shape)}")
            out.append(s)
            continue
        old = shape[i - lead]
        if type(s) is int and s == -1:
            out.append(old)
        elif _concrete(s, old) and old != 1 and s != old:
            raise ShapeError(
                f"expand: the expanded size of the tensor ({s}) must match the existing size ({old}) at "
                f"non-singleton dimension {i}; target sizes {list(sizes)}, tensor sizes {list(shape)}; "
                f"only size-1 dimensions can be expanded (use .repeat(...) to copy data)")
        else:
            out.append(s)
    return tuple(out)


def _expand_rule(input, *sizes, size=None):  # noqa: A002
    return _meta(input, _expand_shape(tuple(input.shape), positional_or_keyword(sizes, size, "expand", "size")))


@op("expand", kind="view", shape_rule=_expand_rule)
def expand(xp, input, *sizes, size=None):  # noqa: A002
    """A read-only broadcast view: size-1 dims repeated without copying, ``-1`` keeps a size."""
    return xp.broadcast_to(input, _expand_shape(input.shape, positional_or_keyword(sizes, size, "expand", "size")))


def _same_rule(input):  # noqa: A002
    return _meta(input, input.shape)


@op("contiguous", kind="view", shape_rule=_same_rule)
def contiguous(xp, input):  # noqa: A002
    """The tensor itself when C-contiguous, else a C-contiguous copy."""
    return input if input.flags.c_contiguous else xp.ascontiguousarray(input)


def _size(shape, dim):
    if dim is None:
        return tuple(shape)
    if not shape:
        raise IndexOutOfRangeError(f"size: dimension specified as {dim} but the tensor has no dimensions")
    return shape[normalize_dim(dim, len(shape), "size")]


def _size_rule(input, dim=None):  # noqa: A002
    return _size(input.shape, dim)


@op("size", kind="shape", shape_rule=_size_rule)
def size(xp, input, dim=None):  # noqa: A002
    """The shape as a tuple of ints, or the size of dimension ``dim``."""
    return _size(input.shape, dim)


@op("dim", kind="shape", shape_rule=lambda input: len(input.shape))
def ndimension(xp, input):  # noqa: A002
    """The number of dimensions (``x.dim()``)."""
    return input.ndim


@op("numel", kind="shape", shape_rule=lambda input: math.prod(input.shape))
def numel(xp, input):  # noqa: A002
    """The number of elements."""
    return input.size


def _narrow_bounds(shape, dim, start, length):
    if not shape:
        raise ShapeError("narrow: cannot be applied to a 0-d tensor")
    d = normalize_dim(dim, len(shape), "narrow")
    n = shape[d]
    if _concrete(n, start) and not -n <= start <= n:
        raise IndexOutOfRangeError(f"narrow: start out of range (expected to be in range of [{-n}, {n}], "
                                   f"but got {start}) for dimension {d} of size {n}")
    if type(start) is int and start < 0:
        start = start + n
    if type(length) is int and length < 0:
        raise ShapeError(f"narrow: length must be non-negative, got {length}")
    if _concrete(n, start, length) and start + length > n:
        raise ShapeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size ({n}) "
                         f"of dimension {d} (input shape {list(shape)})")
    return d, start, length


def _narrow_rule(input, dim, start, length):  # noqa: A002
    d, _, length = _narrow_bounds(tuple(input.shape), dim, start, length)
    return _meta(input, input.shape[:d] + (length,) + input.shape[d + 1:])


@op("narrow", kind="view", shape_rule=_narrow_rule)
def narrow(xp, input, dim, start, length):  # noqa: A002
    """The view ``a[..., start:start + length, ...]`` along ``dim``; ``start`` may be negative."""
    d, start, length = _narrow_bounds(input.shape, dim, start, length)
    return input[(slice(None),) * d + (slice(start, start + length),)]


def split_sizes(shape, split_size_or_sections, dim, name="split"):
    """The dimension and the piece sizes of ``split``: equal pieces of an int size
    (the last may be smaller), or explicit sections that must add up."""
    if not shape:
        raise ShapeError(f"{name}: expects at least a 1-dimensional tensor")
    d = normalize_dim(dim, len(shape), name)
    n = shape[d]
    spec = split_size_or_sections
    if isinstance(spec, (list, tuple)):
        sizes = shape_arg((spec,), name)
        if any(type(s) is int and s < 0 for s in sizes):
            raise ShapeError(f"{name}: split sizes must be non-negative, got {list(sizes)}")
        total = sum(sizes)
        if _concrete(n, total) and total != n:
            raise ShapeError(f"{name}: split sizes {list(sizes)} must sum exactly to {n} "
                             f"(the size of dimension {d} of the input of shape {list(shape)})")
        return d, sizes
    if not _concrete(n):
        raise ShapeError(f"{name}: the number of pieces of symbolic dimension {d} (size {n}) depends on "
                         f"its value; split by explicit sections instead")
    if type(spec) is not int or spec < 0:
        raise ShapeError(f"{name}: split_size must be a non-negative int or a list of sizes, got {spec!r}")
    if spec == 0:
        if n:
            raise ShapeError(f"{name}: split_size can only be 0 if dimension size is 0, "
                             f"but got dimension size of {n}")
        return d, (0,)
    full, rest = divmod(n, spec)
    return d, (spec,) * full + ((rest,) if rest or not full else ())


def _pieces(a, d, sizes):
    head = (slice(None),) * d
    out = []
    start = 0
    for s in sizes:
        out.append(a[head + (slice(start, start + s),)])
        start += s
    return tuple(out)


def _piece_metas(a, d, sizes):
    return tuple(_meta(a, a.shape[:d] + (s,) + a.shape[d + 1:]) for s in sizes)


def _split_rule(input, split_size, dim=0):  # noqa: A002
    return _piece_metas(input, *split_sizes(tuple(input.shape), split_size, dim))


@op("split", kind="view", shape_rule=_split_rule)
def split(xp, input, split_size, dim=0):  # noqa: A002
    """A tuple of views along ``dim``: pieces of an int size, or of the given sizes."""
    return _pieces(input, *split_sizes(input.shape, split_size, dim))


def chunk_sizes(shape, chunks, dim):
    """PyTorch's chunk sizing: pieces of ``ceil(n / chunks)``, so there may be fewer than
    ``chunks``; an empty dimension still gives ``chunks`` empty pieces."""
    if type(chunks) is not int or chunks <= 0:
        raise ShapeError(f"chunk: expects `chunks` to be an int greater than 0, got: {chunks!r}")
    if not shape:
        raise ShapeError("chunk: expects at least a 1-dimensional tensor")
    d = normalize_dim(dim, len(shape), "chunk")
    n = shape[d]
    if type(n) is int and n == 0:
        return d, (0,) * chunks
    return split_sizes(shape, (n + chunks - 1) // chunks, d, "chunk")


def _chunk_rule(input, chunks, dim=0):  # noqa: A002
    return _piece_metas(input, *chunk_sizes(tuple(input.shape), chunks, dim))


@op("chunk", kind="view", shape_rule=_chunk_rule)
def chunk(xp, input, chunks, dim=0):  # noqa: A002
    """At most ``chunks`` views along ``dim``, each of size ``ceil(n / chunks)`` but the last."""
    return _pieces(input, *chunk_sizes(input.shape, chunks, dim))
