"""How the numba backend runs each convolution: registry-keyed lowering rules and their calls.

Eager ``conv2d`` (`fxkit.runtime.ops.conv`) is im2col plus one batched matrix
product, and every call allocates its padded input, its columns and its
result: fresh arrays whose page faults cost as much as copying them (the
columns of a 3x3 conv over ``8 x 64 x 56 x 56`` are 58 MB). A compiled
specialisation knows every shape, so each conv node gets a call object made
once, at lowering, that keeps those buffers:

* **gemm** (1x1, stride 1, no padding, one group): the input *is* the column
  matrix; one ``matmul`` per image straight from the input into the output,
  no im2col copy.
* **im2col** (other single-group convs): the padded input lives in a buffer
  whose zero border is written once; the window view is copied into a reused
  column buffer and the product written into a reused output (``out=``).
* **depthwise** (``groups == in_channels``, one input channel per filter) over
  maps of at least `DEPTHWISE_MIN_PIXELS`: the numba kernel of
  `fxkit.backends.numba_conv`, no columns at all (smaller maps keep numpy's
  conv2d, which was faster there).

Anything else (grouped convs that are not depthwise, unbatched or non-float
inputs, keyword arguments) keeps numpy's ``conv2d``; every choice is a
`Decision` that ``compiled.explain()`` prints. Rules are keyed by the registry
op (`CONV_RULES`), never by a node's name.

Results follow `fxkit.backends.numba_launch`'s contract: an output is written
again only once nothing outside its pool refers to it (CPython's reference
count), so a result the caller or the generated code keeps stays valid.
"""
import math
import sys

import numpy as np

from fxkit.backends.cost_model import Decision
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.conv import PER_IMAGE_GEMM_MIN_PIXELS, conv_geometry
from fxkit.runtime.registry import get_op

# Measured on 2 cores (3x3, float32): the depthwise kernel took 0.2-0.3x numpy's time on 56x56 and
# 112x112 maps, but 1.05-1.7x on 14x14 and 7x7 maps, where each of its vectorised row loops is short.
DEPTHWISE_MIN_PIXELS = 24 * 24
"""Output pixels per plane from which a depthwise conv runs as the numba kernel (else numpy's conv2d)."""
POOL = 2
"""Outputs kept per conv call: two let ``y = f(x)`` in a loop alternate without allocating."""
_FREE = 3  # references to a free pooled buffer inside `take`: the pool, the loop variable, getrefcount's argument
_FLOATS = ("float32", "float64")


def take(pool, shape, dtype, make=np.empty):
    """A buffer from ``pool`` nothing else refers to, else a new one (kept when the pool has room)."""
    for buf in pool:
        if sys.getrefcount(buf) == _FREE:
            return buf
    buf = make(shape, dtype)
    if len(pool) < POOL:
        pool.append(buf)
    return buf


class _ConvCall:
    """Base of the conv calls: called like ``conv2d_impl`` without ``xp``, positional arguments only."""

    __slots__ = ("__name__", "shape", "dtype", "_outputs")

    def __init__(self, name, out_meta):
        self.__name__ = name
        self.shape = tuple(out_meta.shape)
        self.dtype = out_meta.dtype.np
        self._outputs = []

    def _output(self):
        return take(self._outputs, self.shape, self.dtype)

    def __repr__(self):
        return f"<{type(self).__name__} {self.__name__} -> {self.shape}>"


class GemmConv(_ConvCall):
    """A 1x1, stride-1, unpadded, single-group conv: ``out[n] = W @ x[n]`` over the input as it is."""

    __slots__ = ()

    def __call__(self, x, weight, bias=None, *geometry):
        n, c, h, w = x.shape
        oc = weight.shape[0]
        out = self._output()
        np.matmul(weight.reshape(oc, c), np.ascontiguousarray(x).reshape(n, c, h * w),
                  out=out.reshape(n, oc, h * w))
        if bias is not None:
            out += bias.reshape(oc, 1, 1)
        return out


class Im2colConv(_ConvCall):
    """A single-group conv through im2col with its padded input, columns and output reused."""

    __slots__ = ("pads", "stride", "dilation", "per_image", "_padded", "_columns", "_products")

    def __init__(self, name, out_meta, pads, stride, dilation):
        super().__init__(name, out_meta)
        self.pads, self.stride, self.dilation = pads, stride, dilation
        oh, ow = self.shape[2:]
        self.per_image = oh * ow >= PER_IMAGE_GEMM_MIN_PIXELS  # as eager conv2d decides
        self._padded, self._columns, self._products = [], [], []

    def __call__(self, x, weight, bias=None, *geometry):
        (pt, pb), (pl, pr) = self.pads
        n, c, h, w = x.shape
        if pt or pb or pl or pr:
            # NOTE: made with zeros and only the interior written: the border stays zero across calls.
            padded = take(self._padded, (n, c, pt + h + pb, pl + w + pr), x.dtype, np.zeros)
            padded[:, :, pt:pt + h, pl:pl + w] = x
            x = padded
        oc, _, kh, kw = weight.shape
        _, _, oh, ow = self.shape
        (sh, sw), (dh, dw) = self.stride, self.dilation
        s_n, s_c, s_h, s_w = x.strides
        k = c * kh * kw
        wmat = weight.reshape(oc, k)
        out = self._output()
        as_strided = np.lib.stride_tricks.as_strided
        if self.per_image:
            columns = take(self._columns, (n, k, oh * ow), x.dtype)
            windows = as_strided(x, (n, c, kh, kw, oh, ow), (s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw))
            np.copyto(columns.reshape(n, c, kh, kw, oh, ow), windows)
            np.matmul(wmat, columns, out=out.reshape(n, oc, oh * ow))
            if bias is not None:
                out += bias.reshape(oc, 1, 1)
            return out
        columns = take(self._columns, (k, n * oh * ow), x.dtype)
        windows = as_strided(x, (c, kh, kw, n, oh, ow), (s_c, s_h * dh, s_w * dw, s_n, s_h * sh, s_w * sw))
        np.copyto(columns.reshape(c, kh, kw, n, oh, ow), windows)
        products = take(self._products, (oc, n * oh * ow), x.dtype)
        np.matmul(wmat, columns, out=products)
        moved = products.reshape(oc, n, oh, ow).transpose(1, 0, 2, 3)
        if bias is None:
            out[...] = moved
        else:
            np.add(moved, bias.reshape(oc, 1, 1), out=out)
        return out


class DepthwiseConv(_ConvCall):
    """A depthwise conv (one input channel per filter) through `fxkit.backends.numba_conv`."""

    __slots__ = ("arguments", "parallel", "_kernel")

    def __init__(self, name, out_meta, weight_shape, pads, stride, dilation):
        super().__init__(name, out_meta)
        from fxkit.backends import numba_conv  # NOTE: numba loads only when a depthwise conv is lowered

        self.arguments = (*stride, pads[0][0], pads[1][0], *dilation)
        work = math.prod(self.shape) * math.prod(weight_shape[2:])
        self.parallel = work >= numba_conv.PARALLEL_MIN_WORK
        self._kernel = numba_conv.depthwise_conv2d if self.parallel else numba_conv.depthwise_conv2d_serial
        numba_conv.warm(self.dtype)

    def __call__(self, x, weight, bias=None, *geometry):
        out = self._output()
        self._kernel(out, np.ascontiguousarray(x), np.ascontiguousarray(weight), *self.arguments)
        if bias is not None:
            out += bias.reshape(-1, 1, 1)
        return out


def lower_conv2d(node):
    """``(call or None, Decision)`` for a ``conv2d`` node (see the module docstring)."""
    conv = node.target
    if node.kwargs:
        return None, Decision(node.name, "numpy conv2d", "called with keyword arguments (conv calls are positional)")
    metas = [a.meta.get("tensor_meta") if hasattr(a, "meta") else a for a in node.args]
    bound = conv.signature.bind(*metas).arguments
    x, weight, bias = bound["input"], bound["weight"], bound.get("bias")
    out = node.meta.get("tensor_meta")
    if not all(isinstance(m, TensorMeta) for m in (x, weight, out)) or (bias is not None
                                                                         and not isinstance(bias, TensorMeta)):
        return None, Decision(node.name, "numpy conv2d", "an operand's metadata is unknown")
    if len(x.shape) != 4:
        return None, Decision(node.name, "numpy conv2d", "unbatched input")
    if x.dtype.name not in _FLOATS or not all(isinstance(d, int) for d in x.shape):
        return None, Decision(node.name, "numpy conv2d", f"{x.dtype.name} input (rules take float32/float64)")
    groups = bound.get("groups", 1)
    _, stride, pads, dilation, _ = conv_geometry("conv2d", 2, x, weight, bias, bound.get("stride", 1),
                                                 bound.get("padding", 0), bound.get("dilation", 1), groups)
    oc, cg, kh, kw = weight.shape
    channels = x.shape[1]
    if groups == channels and cg == 1 and groups > 1:
        pixels = out.shape[2] * out.shape[3]
        if pixels < DEPTHWISE_MIN_PIXELS:
            return None, Decision(node.name, "numpy conv2d", f"depthwise over {out.shape[2]}x{out.shape[3]} "
                                                             f"maps: below {DEPTHWISE_MIN_PIXELS} output pixels "
                                                             f"the numba kernel's short rows lose to BLAS")
        call = DepthwiseConv(f"{node.name}_depthwise", out, weight.shape, pads, stride, dilation)
        threads = "numba's threads" if call.parallel else "one thread (little work)"
        return call, Decision(node.name, "depthwise numba kernel", f"groups == in_channels == {channels}: no "
                                                                   f"im2col, one pass per {kh}x{kw} tap, {threads}")
    if groups != 1:
        return None, Decision(node.name, "numpy conv2d", f"grouped ({groups} groups) but not depthwise")
    if (kh, kw) == (1, 1) and stride == (1, 1) and pads == ((0, 0), (0, 0)):
        return GemmConv(f"{node.name}_gemm", out), Decision(node.name, "1x1 GEMM", "stride 1, no padding: the input is "
                                                                         "the column matrix, no im2col")
    layout = "per-image products" if out.shape[2] * out.shape[3] >= PER_IMAGE_GEMM_MIN_PIXELS else \
        "one folded product"
    kept = "padded input, columns" if any(p for pair in pads for p in pair) else "columns"
    return Im2colConv(f"{node.name}_im2col", out, pads, stride, dilation), Decision(
        node.name, "im2col, reused buffers", f"{kh}x{kw} stride {stride}: {kept} and output kept across "
                                             f"calls; {layout}")


CONV_RULES = {get_op("conv2d"): lower_conv2d}
"""Registry op -> ``rule(node) -> (call or None, Decision)``: how the numba backend runs that op."""
