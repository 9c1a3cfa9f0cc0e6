"""Ops that derivative rules need and no forward op provides: ``scatter_add`` and
``index_add`` (PyTorch's, usable in forward code too), ``getitem_backward`` (the
adjoint of indexing), ``threshold_backward`` and ``max_pool2d_with_indices_backward``
(ATen's) and ``conv2d_weight_grad`` (``torch.nn.grad.conv2d_weight``).

They are registry ops like any other, so a graph-level transform that runs
the rules on graph values records them as nodes.
"""
import math

import numpy as np

from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.batch_last_columns import (batch_last_columns, batch_last_input, batch_last_rows,
                                                  has_short_rows)
from fxkit.runtime.ops.channels_last_columns import channels_last_pays, weight_grad_channels_last
from fxkit.runtime.ops.conv import check_rank, ntuple, pad_spatial
from fxkit.runtime.ops.dims import normalize_dim
from fxkit.runtime.ops.elementwise_binary import where
from fxkit.runtime.ops.loop_gate import loops_fit
from fxkit.runtime.ops.low_precision import BFLOAT16_KIND, run_in_float32
from fxkit.runtime.ops.indexing import (FLAT_INDEX_MIN, _along, _check_bounds, along_layout, as_rows, flat_along,
                                       getitem, rows_fit, scatter, torch_index)
from fxkit.runtime.ops.nn_checks import dtype_of, require_float, require_integer, shown


def add_at(xp, out, index, values):
    """``out[index] += values`` where repeated indices add up (numpy's ``add.at``)."""
    if xp.__name__ == "numpy":
        xp.add.at(out, index, values)
    else:
        import cupyx  # NOTE: imported only with a cuda tensor, like cupy itself

        cupyx.scatter_add(out, index, values)


# -- scatter_add, index_add ---------------------------------------------------------
def _same_dtype(name, a, src, what):
    if dtype_of(a) is not dtype_of(src):
        raise DTypeError(f"{name}: expected self.dtype to be equal to {what}.dtype, got {dtype_of(a).name} and "
                         f"{dtype_of(src).name}; cast {what} with .to({dtype_of(a).name})")


def _scatter_add_rule(input, dim, index, src):  # noqa: A002
    along_layout("scatter_add", tuple(input.shape), dim, index, tuple(src.shape))
    _same_dtype("scatter_add", input, src, "src")
    return TensorMeta(tuple(input.shape), input.dtype, input.device)


@op("scatter_add", kind="other", shape_rule=_scatter_add_rule)
def scatter_add(xp, input, dim, index, src):  # noqa: A002
    """A copy of ``a`` with ``out[i][index[i][j]] += src[i][j]`` for ``dim=1``; repeated
    indices add up. Only the leading ``index.shape`` block of ``src`` is read.

    Example:
        >>> fxkit.zeros(3).scatter_add(0, fxkit.tensor([0, 0, 2]), fxkit.ones(3))
        tensor([2., 0., 1.])
    """
    d = along_layout("scatter_add", input.shape, dim, index, src.shape)
    _same_dtype("scatter_add", input, src, "src")
    shape = input.shape
    if input.ndim == 0 or index.ndim == 0:
        input, index, src = input.reshape(-1), index.reshape(-1), src.reshape(-1)
    _check_bounds("scatter_add", index, d, input.shape[d])
    out = input.copy()
    values = src[tuple(slice(0, s) for s in index.shape)]
    if rows_fit(xp, out, d, index, values):
        from fxkit.runtime.ops.pool_loops import scatter_add_rows  # NOTE: numba loads at the first large scatter

        # the same sums as below, in one pass: float64 where bincount would run, else in order as add.at
        scatter_add_rows(*as_rows(out, index, values), _sums_by_count(index.size, out.size))  # checked above
        return out.reshape(shape)
    if xp.__name__ == "numpy" and out.dtype.kind == "f" and _sums_by_count(index.size, out.size):
        # NOTE: each position's sum in float64, rounded once into its dtype: sequential float32 adds
        # (add.at, PyTorch's loop) round at every step, so theirs may differ from it in the last bits.
        sums = xp.bincount(flat_along(xp, index, d, out.shape).reshape(-1), values.reshape(-1), out.size)
        xp.add(out, sums.reshape(out.shape), out=out, casting="unsafe")
        return out.reshape(shape)
    add_at(xp, out, _along(xp, index, d), values)
    return out.reshape(shape)


def _sums_by_count(picks, size):
    """Whether ``picks`` additions into ``size`` floats go faster as one weighted ``bincount`` over all of
    them than through ``add.at``: add.at costs ~8 ns an addition, bincount ~1 ns a result
    (max pool 3x3/2's backward, 131k picks into 524k: add.at 1.0 ms, bincount 0.32 ms)."""
    return picks >= FLAT_INDEX_MIN and picks * 8 >= size


def _index_add_layout(a, dim, index, source):
    require_integer("index_add", index, "index")
    if len(index.shape) > 1:
        raise ShapeError(f"index_add: index must be a vector (0-d or 1-d), got shape {shown(index.shape)}")
    d = normalize_dim(dim, len(a.shape), "index_add")
    count = math.prod(index.shape)
    expected = tuple(a.shape[:d]) + (count,) + tuple(a.shape[d + 1:]) if len(a.shape) else ()
    if len(source.shape) != len(expected) or any(isinstance(x, int) and isinstance(y, int) and x != y
                                                  for x, y in zip(source.shape, expected)):
        raise ShapeError(f"index_add: source of shape {shown(source.shape)} does not fit: expected {shown(expected)} "
                         f"(self {shown(a.shape)} with dimension {d} of the index's length {count})")
    _same_dtype("index_add", a, source, "source")
    return d


def _index_add_rule(input, dim, index, source, alpha=1):  # noqa: A002
    _index_add_layout(input, dim, index, source)
    return TensorMeta(tuple(input.shape), input.dtype, input.device)


@op("index_add", kind="other", shape_rule=_index_add_rule)
def index_add(xp, input, dim, index, source, alpha=1):  # noqa: A002
    """A copy of ``a`` with ``alpha * source`` added at positions ``index`` (a vector) along
    ``dim``; repeated indices add up.

    Example:
        >>> fxkit.zeros(3, 2).index_add(0, fxkit.tensor([2, 2]), fxkit.ones(2, 2))
        tensor([[0., 0.], [0., 0.], [2., 2.]])
    """
    d = _index_add_layout(input, dim, index, source)
    shape = input.shape
    if input.ndim == 0:
        input, source = input.reshape(1), source.reshape(1)
    index = index.reshape(-1)
    _check_bounds("index_add", index, d, input.shape[d])
    out = input.copy()
    add_at(xp, out, (slice(None),) * d + (index,), source if alpha == 1 else source * alpha)
    return out.reshape(shape)


# -- getitem_backward -----------------------------------------------------------------
def _getitem_backward_rule(grad, shape, index):
    return TensorMeta(tuple(shape), grad.dtype, grad.device)


@op("getitem_backward", kind="other", shape_rule=_getitem_backward_rule, method=False)
def getitem_backward(xp, grad, shape, index):
    """Zeros of ``shape`` with ``grad`` added where ``x[index]`` reads (the adjoint of
    ``getitem``); elements an advanced index picks several times get every contribution."""
    out = xp.zeros(tuple(shape), grad.dtype)
    first, second = torch_index(index, len(shape))
    if second is None and not any(_advanced(i) for i in first):
        out[first] += grad  # basic indexing: a view, each element once
        return out
    # Where each element of x[index] comes from, by the forward op itself: the same rules exactly.
    positions = getitem.impl(xp, xp.arange(out.size).reshape(out.shape), index)
    add_at(xp, out.reshape(-1), positions.reshape(-1), grad.reshape(-1))
    return out


def _advanced(i):
    return not (type(i) is int or type(i) is slice or i is None or i is Ellipsis)


# -- threshold_backward ----------------------------------------------------------------
@op("threshold_backward", kind="elementwise", promote="common", method=False, template="where(b <= c, 0, a)")
def threshold_backward(xp, grad_output, input, threshold):  # noqa: A002
    """ReLU's gradient (ATen's op): ``grad_output`` where ``input > threshold``, else 0; a NaN input passes
    its gradient on. ``input`` is ReLU's output (or input: they agree on the sign).

    One pass over contiguous float arrays (a numba loop), where ``where(input <= 0, 0, g)`` made a bool mask
    and a select: ResNet-18's 17 ReLU gradients a step (batch 8, 64x64) in 0.5 against 1.0 ms.
    """
    if (type(input) is np.ndarray and type(grad_output) is np.ndarray and input.shape == grad_output.shape
            and input.dtype == grad_output.dtype and input.dtype.kind == "f" and type(threshold) in (int, float)
            and input.flags.c_contiguous and grad_output.flags.c_contiguous and loops_fit(xp, input)):
        from fxkit.runtime.ops.select_loop import zero_at_or_below  # NOTE: numba loads at the first large ReLU

        out = np.empty_like(grad_output)
        zero_at_or_below(grad_output.reshape(-1), input.reshape(-1), input.dtype.type(threshold),
                         input.dtype.type(0), out.reshape(-1))
        return out
    return where.impl(xp, xp.less_equal(input, threshold), 0, grad_output)


# -- max_pool2d_with_indices_backward -------------------------------------------------
_POOL_BACKWARD = "max_pool2d_with_indices_backward"


def pool_windows_overlap(kernel_size, stride, dilation):
    """Whether a 2-D pool's windows may share an element: a stride shorter than the dilated kernel (a stride
    of None or ``()`` is the kernel's, as in ``max_pool2d``)."""
    kernel = ntuple(kernel_size, 2, _POOL_BACKWARD, "kernel_size")
    steps = kernel if stride is None or stride == [] or stride == () else ntuple(stride, 2, _POOL_BACKWARD, "stride")
    return any(s < d * (k - 1) + 1 for k, s, d in zip(kernel, steps, ntuple(dilation, 2, _POOL_BACKWARD, "dilation")))


def _check_pool_backward(grad_output, input_shape, indices):
    require_float(_POOL_BACKWARD, grad_output, "grad_output")
    require_integer(_POOL_BACKWARD, indices, "indices")
    shape = tuple(input_shape)
    if len(shape) not in (3, 4):
        raise ShapeError(f"{_POOL_BACKWARD}: input_shape must be (C, H, W) or (N, C, H, W), got {list(shape)}")
    if tuple(indices.shape) != tuple(grad_output.shape) or len(grad_output.shape) != len(shape) \
            or tuple(grad_output.shape[:-2]) != shape[:-2]:
        raise ShapeError(f"{_POOL_BACKWARD}: grad_output {shown(grad_output.shape)} and indices "
                         f"{shown(indices.shape)} must have one shape, the pool's output of an input of shape "
                         f"{list(shape)}")
    return shape


def _pool_backward_rule(grad_output, input_shape, kernel_size, stride, padding, dilation, ceil_mode, indices):
    shape = _check_pool_backward(grad_output, input_shape, indices)
    return TensorMeta(shape, grad_output.dtype, grad_output.device)


@op(_POOL_BACKWARD, kind="other", shape_rule=_pool_backward_rule, method=False)
def max_pool2d_with_indices_backward(xp, grad_output, input_shape, kernel_size, stride, padding, dilation, ceil_mode,
                                     indices):
    """The gradient of ``max_pool2d`` with respect to its input (ATen's op of this name): zeros of
    ``input_shape`` with each output's gradient at the element its index (into ``H * W``) picked.

    Windows that cannot overlap (stride at least the dilated kernel: the usual 2x2 stride 2) pick each
    element at most once, so the gradients are written; overlapping windows (ResNet's 3x3 stride 2) add
    theirs in order, in the dtype, as PyTorch's kernel and numpy's ``add.at`` do (ResNet-18's stem pool
    at batch 8, 64x64: 0.47 -> 0.2 ms against float64 sums). Large float inputs take one numba loop over the
    rows of each plane. One op where the rule made five (zeros, three reshapes and the scatter: 76 against
    36 us for the digits Net's first pool).

    Args:
        grad_output, indices: the gradient of the pool's values and its indices, of one shape.
        input_shape: the pooled input's shape, ``(N, C, H, W)`` or ``(C, H, W)``.
        kernel_size, stride, padding, dilation, ceil_mode: the pool's.
    """
    shape = _check_pool_backward(grad_output, input_shape, indices)
    disjoint = not pool_windows_overlap(kernel_size, stride, dilation)
    lead = shape[:-2]
    out = xp.zeros(lead + (shape[-2] * shape[-1],), grad_output.dtype)
    index = indices.reshape(lead + (math.prod(indices.shape[-2:]),))
    values = grad_output.reshape(index.shape)
    if rows_fit(xp, out, out.ndim - 1, index, values):
        from fxkit.runtime.ops.pool_loops import scatter_rows  # NOTE: numba loads at the first large pool

        if not scatter_rows(*as_rows(out, index, values), not disjoint):
            _check_bounds(_POOL_BACKWARD, index, out.ndim - 1, out.shape[-1])
        return out.reshape(shape)
    if disjoint:
        return scatter.impl(xp, out, -1, index, values).reshape(shape)
    _check_bounds(_POOL_BACKWARD, index, out.ndim - 1, out.shape[-1])
    # in order, in the dtype: numpy's add.at, as the loop above and PyTorch's kernel add
    add_at(xp, out, _along(xp, index, out.ndim - 1), values)
    return out.reshape(shape)


# -- conv2d_weight_grad ------------------------------------------------------------------
def conv_pads(padding, kernel, dilation, name="conv2d"):
    """A ``(before, after)`` pair per spatial dim of a convolution's ``padding`` argument
    (an int, a tuple, ``'valid'`` or ``'same'``, which pads the odd extra after)."""
    if padding == "valid":
        return ((0, 0),) * len(kernel)
    if padding == "same":
        return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation))
    return tuple((p, p) for p in ntuple(padding, len(kernel), name, "padding"))


def _weight_grad_rule(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    require_float("conv2d_weight_grad", input)
    return TensorMeta(tuple(weight_size), input.dtype, input.device)


@op("conv2d_weight_grad", kind="conv", shape_rule=_weight_grad_rule, method=False)
def conv2d_weight_grad(xp, input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """The gradient of ``conv2d(input, weight, ...)`` (or of conv3d's, by the weight's rank) with
    respect to its weight, given the output's gradient (``torch.nn.grad.conv2d_weight``): im2col
    of the input and one batched matrix product, the same formulation as the forward.

    Args:
        input: ``(N, C, H, W)`` (``(N, C, D, H, W)`` for conv3d).
        weight_size: the weight's shape ``(out_channels, C / groups, kH, kW)`` (or ``kD, kH, kW``).
        grad_output: ``(N, out_channels, OH, OW)`` (or ``OD, OH, OW``).
        stride, padding, dilation, groups: the forward convolution's.
    """
    nd = len(weight_size) - 2
    check_rank("conv2d_weight_grad", input.shape, nd + 2)
    if _dt.from_numpy(input.dtype) is not _dt.from_numpy(grad_output.dtype):
        raise DTypeError(f"conv2d_weight_grad: input ({input.dtype}) and grad_output ({grad_output.dtype}) must "
                         f"have the same dtype")
    if input.dtype.kind == BFLOAT16_KIND:
        return run_in_float32(conv2d_weight_grad.impl, xp, input, weight_size, grad_output, stride, padding,
                              dilation, groups)
    oc, cg, kernel = weight_size[0], weight_size[1], tuple(weight_size[2:])
    stride, dilation = ntuple(stride, nd, "conv2d", "stride"), ntuple(dilation, nd, "conv2d", "dilation")
    pads = conv_pads(padding, kernel, dilation)
    n, g, k = input.shape[0], groups, cg * math.prod(kernel)
    out_sizes = tuple((size + lo + hi - d * (kk - 1) - 1) // s + 1
                      for size, (lo, hi), kk, s, d in zip(input.shape[2:], pads, kernel, stride, dilation))
    if tuple(grad_output.shape) != (n, oc) + out_sizes or input.shape[1] != cg * g:
        raise ShapeError(f"conv2d_weight_grad: grad_output of shape {shown(grad_output.shape)} does not fit the "
                         f"convolution of an input of shape {shown(input.shape)} by a weight of shape "
                         f"{shown(weight_size)} (groups={groups}), whose output has shape "
                         f"{shown((n, oc) + out_sizes)}")
    if g == 1 and nd == 2 and channels_last_pays(xp, n, cg, weight_size, out_sizes):
        return weight_grad_channels_last(xp, input, weight_size, grad_output, stride, pads, dilation)
    pixels = math.prod(out_sizes)
    if k >= oc // g and has_short_rows(out_sizes):
        # Columns that outweigh the gradient are gathered batch-last (long runs); the gradient's
        # copy then runs batch-last too, shorter, which is why a small k keeps the plain order.
        cols = batch_last_columns(xp, batch_last_input(xp, input, pads), g, kernel, stride, dilation, out_sizes)
        return _weight_product(xp, batch_last_rows(xp, grad_output, g), cols, weight_size)
    x = pad_spatial(xp, input, pads) if any(lo or hi for lo, hi in pads) else input
    s_n, s_c, spatial_strides = x.strides[0], x.strides[1], x.strides[2:]
    cols = xp.lib.stride_tricks.as_strided(
        x, (g, cg) + kernel + (n,) + out_sizes,
        (cg * s_c, s_c) + tuple(st * d for st, d in zip(spatial_strides, dilation)) + (s_n,)
        + tuple(st * s for st, s in zip(spatial_strides, stride)))
    cols = cols.reshape(g, k, n * pixels)
    gmat = grad_output.reshape(n, g, oc // g, pixels).transpose(1, 2, 0, 3).reshape(g, oc // g, n * pixels)
    return _weight_product(xp, gmat, cols, weight_size)


def _weight_product(xp, rows, cols, weight_size):
    """The weight gradient ``rows @ cols^T`` (``rows`` ``(G, OCg, M)``, ``cols`` ``(G, K, M)``) as ``weight_size``.

    Where the columns outnumber the output channels and the product runs over many pixels it is computed as
    ``(cols @ rows^T)^T`` and transposed into an array of its own: OpenBLAS (2 threads) runs that orientation
    faster, ResNet-18's 64-channel 3x3 layer at batch 8 and 16x16 in 0.40 against 0.58 ms, the digits Net's
    second conv in 55 against 70 us. The transposing copy grows with the weight, not the pixels: on
    ResNet-18's 512-channel layer at 2x2 (32 pixels, 2.4M weights) it took 8.5 ms against the plain
    product's 1.2, so large weights and short products keep the plain form (`TRANSPOSED_PRODUCT_MIN_PIXELS`,
    `TRANSPOSED_PRODUCT_MAX_WEIGHTS`)."""
    k, ocg, pixels = cols.shape[1], rows.shape[1], rows.shape[2]
    if k > ocg and pixels >= TRANSPOSED_PRODUCT_MIN_PIXELS and k * ocg <= TRANSPOSED_PRODUCT_MAX_WEIGHTS:
        # NOTE: one copy into an array of its own (no base): `.grad` takes it as it is (engine._sole_owner)
        return xp.ascontiguousarray(xp.matmul(cols, rows.transpose(0, 2, 1)).transpose(0, 2, 1)).reshape(
            tuple(weight_size))
    return xp.matmul(rows, cols.transpose(0, 2, 1)).reshape(tuple(weight_size))


TRANSPOSED_PRODUCT_MIN_PIXELS = 512
"""Pixels (``N * OH * OW``) from which `_weight_product` may take the transposed orientation."""
TRANSPOSED_PRODUCT_MAX_WEIGHTS = 1 << 16
"""Weights per group (``OCg * Cg * KH * KW``) up to which it may: the transposing copy of a larger one costs more
than the orientation saves."""
