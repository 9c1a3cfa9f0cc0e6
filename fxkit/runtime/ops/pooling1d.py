"""1-D pooling: ``max_pool1d`` and ``avg_pool1d``, as the 2-D pools over a height of one.

An ``(N, C, L)`` input (or unbatched ``(C, L)``) gains a height axis of size 1,
and the 1-D kernel, stride, padding and dilation become ``(1, k)`` pairs, so
the window arithmetic, ceil mode, padding rules and max indices are
`pooling`'s, checked and reported under the 1-D op's name. ``max_pool1d``'s
indices count along ``L``, as PyTorch's do (the 2-D index into ``1 * L`` is
the same number).
"""
from fxkit.errors import DTypeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import op
from fxkit.runtime.ops.conv import check_rank, ntuple
from fxkit.runtime.ops.nn_checks import dtype_of
from fxkit.runtime.ops.pooling import _pool_geometry, avg_pool2d, max_pool2d


def _as_2d(name, shape, kernel_size, stride, padding, dilation, ceil_mode):
    """The 2-D pool's arguments for a 1-D pool (pairs with a height of 1) and the 1-D output shape."""
    check_rank(name, shape, 3)
    kernel = (1, ntuple(kernel_size, 1, name, "kernel_size")[0])
    stride = kernel if stride is None or stride == () or stride == [] else (1, ntuple(stride, 1, name, "stride")[0])
    padding = (0, ntuple(padding, 1, name, "padding")[0])
    dilation = (1, ntuple(dilation, 1, name, "dilation")[0])
    tall = TensorMeta(tuple(shape[:-1]) + (1, shape[-1]), _dt.float32)
    out = _pool_geometry(name, tall, kernel, stride, padding, dilation, ceil_mode)[-1]
    return kernel, stride, padding, dilation, out[:-2] + out[-1:]


def _max_pool1d_rule(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                     return_indices=False):
    out_shape = _as_2d("max_pool1d", input.shape, kernel_size, stride, padding, dilation, ceil_mode)[-1]
    values = TensorMeta(out_shape, input.dtype, input.device)
    return (values, TensorMeta(out_shape, _dt.int64, input.device)) if return_indices else values


@op("max_pool1d", kind="conv", shape_rule=_max_pool1d_rule, method=False)
def max_pool1d(xp, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """1-D max pooling, as ``torch.nn.functional.max_pool1d``.

    Args:
        input: ``(N, C, L)`` or unbatched ``(C, L)``.
        kernel_size, stride, padding, dilation: ints (or 1-sequences); ``stride`` defaults
            to ``kernel_size``; ``padding`` is at most half the kernel and never wins.
        ceil_mode: round the output size up (a last, partial window when it starts inside).
        return_indices: also return, for each output, the index along ``L`` of the value it took.

    Example:
        >>> F.max_pool1d(fxkit.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2)
        tensor([[[3., 2.]]])
    """
    kernel, stride, padding, dilation, _ = _as_2d("max_pool1d", input.shape, kernel_size, stride, padding,
                                                  dilation, ceil_mode)
    if not return_indices and not dtype_of(input).is_floating_point:
        # NOTE: PyTorch's max_pool1d kernel is float-only; with indices it runs max_pool2d's, which takes ints.
        raise DTypeError(f"max_pool1d: {dtype_of(input).name} tensors are not supported without return_indices "
                         f"(PyTorch's max_pool1d is float-only); cast the input with .float() first")
    out = max_pool2d.impl(xp, input[..., None, :], kernel, stride, padding, dilation, ceil_mode, return_indices)
    if return_indices:
        return out[0][..., 0, :], out[1][..., 0, :]
    return out[..., 0, :]


def _avg_pool1d_rule(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    out_shape = _as_2d("avg_pool1d", input.shape, kernel_size, stride, padding, 1, ceil_mode)[-1]
    return TensorMeta(out_shape, input.dtype, input.device)


@op("avg_pool1d", kind="conv", shape_rule=_avg_pool1d_rule, method=False)
def avg_pool1d(xp, input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """1-D average pooling, as ``torch.nn.functional.avg_pool1d``.

    Args:
        input: ``(N, C, L)`` or unbatched ``(C, L)``.
        kernel_size, stride, padding: ints (or 1-sequences); ``stride`` defaults to ``kernel_size``.
        ceil_mode: round the output size up (a last, partial window when it starts inside).
        count_include_pad: divide by the window's size including zero padding (PyTorch's
            default) rather than by the number of real input values in it.

    Example:
        >>> F.avg_pool1d(fxkit.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2)
        tensor([[[2., 1.]]])
    """
    kernel, stride, padding, _, _ = _as_2d("avg_pool1d", input.shape, kernel_size, stride, padding, 1, ceil_mode)
    return avg_pool2d.impl(xp, input[..., None, :], kernel, stride, padding, ceil_mode, count_include_pad)[..., 0, :]
