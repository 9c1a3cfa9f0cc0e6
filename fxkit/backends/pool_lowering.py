"""How the numba backend runs ``max_pool2d``: channels-last numba kernels after channels-last convs, and
with indices (a training graph's pools) from any layout.

A pool of a conv's channels-last result (`fxkit.backends.conv_lowering`)
runs `fxkit.backends.numba_conv.max_pool_nhwc` along the contiguous channels
and keeps the result channels-last for the next conv; numpy's NCHW pool
would walk that memory against its strides. A pool that returns the indices
of its maxima (``return_indices``, what `fxkit.transforms.grad`'s pool
backward scatters by) runs it with indices from an input in any
layout, as numpy's masked update per tap is the slow one. Ceil mode,
dilation and non-float inputs keep numpy's pool; each choice is a `Decision`
that ``explain()`` prints.
"""
import numpy as np

from fxkit.backends.conv_lowering import _FLOATS, _ChannelsLast, take
from fxkit.backends.cost_model import Decision
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.conv import ntuple
from fxkit.runtime.registry import get_op


class MaxPoolChannelsLast(_ChannelsLast):
    """A max pool of a channels-last input, computed channels-last by `fxkit.backends.numba_conv.max_pool_nhwc`
    (each window's maxima along contiguous channels), where numpy's NCHW pool would walk the input against its
    strides and return NCHW memory for the next conv to transpose again."""

    __slots__ = ("geometry",)

    def __init__(self, name, out_meta, kernel, stride, padding):
        super().__init__(name, out_meta)
        from fxkit.backends import numba_conv  # NOTE: numba loads only when a pool is lowered

        self.geometry = (*kernel, *stride, *padding)
        numba_conv.warm_max_pool(self.dtype)

    def __call__(self, x, *geometry, **options):
        """Called with the node's arguments; the geometry was read when lowering."""
        from fxkit.backends.numba_conv import max_pool_nhwc

        out = self._output()
        max_pool_nhwc(out, self._input(x), *self.geometry)
        return out.transpose(0, 3, 1, 2)


class MaxPoolIndicesChannelsLast(MaxPoolChannelsLast):
    """A max pool that returns its maxima's indices too (``return_indices``, a training graph's pool), computed
    channels-last by `fxkit.backends.numba_conv.max_pool_nhwc` from an input in any layout (one that
    does not lie channels-last is copied so first): numpy's masked update per tap took 17-45x as long."""

    __slots__ = ("_indices",)

    def __init__(self, name, out_meta, kernel, stride, padding):
        super().__init__(name, out_meta, kernel, stride, padding)
        self._indices = []

    def __call__(self, x, *geometry, **options):
        """Called with the node's arguments; the geometry was read when lowering."""
        from fxkit.backends.numba_conv import max_pool_nhwc

        out, indices = self._output(), take(self._indices, self.shape, np.int64)
        max_pool_nhwc(out, self._input(x), *self.geometry, indices)
        return out.transpose(0, 3, 1, 2), indices.transpose(0, 3, 1, 2)


def lower_max_pool2d(node, reordered):
    """``(call or None, Decision or None)`` for a ``max_pool2d`` node: channels-last when its input's
    memory is channels-last (in ``reordered``, from a conv call made here) or when it returns indices
    (numpy's pool with indices is the slow one); None, None leaves any other pool to numpy's without a
    word (an NCHW input: nothing to choose)."""
    source = node.args[0] if node.args else None
    if not isinstance(getattr(source, "meta", {}).get("tensor_meta"), TensorMeta):
        return None, None
    bound = node.target.signature.bind(*node.args, **node.kwargs).arguments
    with_indices = bound.get("return_indices", False) is True
    if source.name not in reordered and not with_indices:
        return None, None
    x, out = source.meta["tensor_meta"], node.meta.get("tensor_meta")
    if with_indices:
        out = out[0] if isinstance(out, tuple) and not isinstance(out, TensorMeta) and len(out) == 2 else None
    why = None
    if len(x.shape) != 4 or not isinstance(out, TensorMeta) or x.dtype.name not in _FLOATS:
        why = "not a batched float32/float64 input"
    elif bound.get("ceil_mode", False) or ntuple(bound.get("dilation", 1), 2, "max_pool2d", "dilation") != (1, 1):
        why = "ceil mode or dilation"
    if why is not None:
        return None, Decision(node.name, "numpy max_pool2d", why)
    kernel = ntuple(bound["kernel_size"], 2, "max_pool2d", "kernel_size")
    stride = bound.get("stride")
    stride = kernel if stride is None or stride in ((), []) else ntuple(stride, 2, "max_pool2d", "stride")
    padding = ntuple(bound.get("padding", 0), 2, "max_pool2d", "padding")
    layout = f"%{source.name} is channels-last" if source.name in reordered else \
        f"%{source.name} copied channels-last"
    if with_indices:
        return MaxPoolIndicesChannelsLast(f"{node.name}_channels_last", out, kernel, stride, padding), Decision(
            node.name, "max pool with indices, channels-last", f"{layout}: numba's maxima of each "
                                                               f"{kernel[0]}x{kernel[1]} window and where they lie, "
                                                               f"along contiguous channels")
    return MaxPoolChannelsLast(f"{node.name}_channels_last", out, kernel, stride, padding), Decision(
        node.name, "max pool, channels-last", f"{layout}: numba's maxima of each "
                                              f"{kernel[0]}x{kernel[1]} window along contiguous channels")


POOL_RULES = {get_op("max_pool2d"): lower_max_pool2d}
"""Registry op -> ``rule(node, reordered) -> (call or None, Decision or None)``: the ops that follow
their input's layout (`reordered_values`), lowered once the convs before them are."""
