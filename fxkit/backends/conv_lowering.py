"""How the numba backend runs each convolution: registry-keyed lowering rules and their calls.

Eager ``conv2d`` (`fxkit.runtime.ops.conv`) keeps PyTorch's NCHW layout: im2col
columns per image and one matrix product per image (or, on small maps, two
transposing copies around one product), and every call allocates its padded
input, its columns and its result. A compiled specialisation knows every
shape, so each conv node gets a call object, made once at lowering, that
computes in **channels-last** memory and keeps its buffers:

* **gemm** (1x1, stride 1, no padding, one group): the ``(N, H, W, C)`` input
  *is* the column matrix: one ``(N*H*W, C) @ (C, OC)`` product, no im2col.
* **im2col** (other single-group convs): a numba kernel copies the windows
  of a block of output pixels, zeros for the padding (no padded copy), into
  an ``(pixels, KH*KW*C)`` column buffer every conv shares (`scratch`), and
  one product multiplies the block while it is in cache
  (`COLUMN_BLOCK_BYTES`), block after block over every image.
* **winograd** (3x3, stride-1 convs of 128+ channels outside training graphs,
  `fxkit.backends.winograd_conv.lower_winograd`):
  F(2x2, 3x3) tiles, 16 products of ``(tiles, C) @ (C, OC)``, the transforms in numba.
* **depthwise** (``groups == in_channels``, one input channel per filter): the
  channels-last numba kernel of `fxkit.backends.numba_conv`, no columns at all.

Why channels-last: on the reference machine's OpenBLAS (2 threads) one
``(25088, 64) @ (64, 256)`` product took 72 ms where the eight per-image
``(256, 64) @ (64, 3136)`` products of the same 1x1 conv took 347 ms
(interleaved medians, ResNet-50's layer1 at batch 8). A 1x1 conv whose output
has fewer pixels (``N*OH*OW``) than channels runs **channel-major**: one
``(OC, C) @ (C, N*OH*OW)`` product over its input read in any layout (as it lies
when that is a channel-major result), its result an NCHW view of the
``(OC, N, OH, OW)`` product: ResNet-50's 256->1024 1x1 at 14x14, batch 1, took
0.63 against 0.68-0.70 ms channels-last. Larger kernels stay channels-last
whatever their size: with the blocked gather, ResNet-18's 3x3 convs at 14x14
and 7x7 took 1.34 and 1.74 ms channels-last against 1.82 and 2.22 ms
channel-major at batch 1, 11.0 against 12.7 ms at 7x7 and batch 8
(interleaved medians of 7). Results are
``(N, OC, OH, OW)`` views of ``(N, OH, OW, OC)`` buffers, so the graph stays
NCHW while the memory stays channels-last from conv to conv: the next conv
reads its input without a copy, and the elementwise tail between them (the
bias is added to the product's rows in place; ReLU, residual adds) runs as
one kernel over the arrays' memory order (`fxkit.backends.numba_launch`),
and a max pool of such a value runs channels-last too (`fxkit.backends.pool_lowering`). A ``view`` of one
runs as ``reshape`` (it copies; see `reordered_values`), and an elementwise
group broadcasting over one is priced as numpy's ufuncs would run it
(`fxkit.backends.cost_model.strided_group`).

Anything else (grouped convs that are not depthwise, unbatched or non-float
inputs, keyword arguments) keeps numpy's ``conv2d``; every choice is a
`Decision` that ``compiled.explain()`` prints. Rules are keyed by the registry
op (`CONV_RULES`), never by a node's name.

Results follow `fxkit.backends.numba_launch`'s contract: an output buffer is
written again only once nothing outside its pool refers to it (CPython's
reference count; a view counts), so a result the caller or the generated
code keeps stays valid.
"""
import math
import sys
import threading
import weakref

import numpy as np

from fxkit.backends.bound_arguments import bound_metas
from fxkit.backends.cost_model import Decision
from fxkit.backends.packed_weight import packed_weight
from fxkit.runtime.autograd.autograd_meta import WRITES
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.batch_last_columns import batch_last_columns, batch_last_input, has_short_rows
from fxkit.runtime.ops.conv import conv_geometry
from fxkit.runtime.ops.scratch import scratch as runtime_scratch
from fxkit.runtime.registry import get_op
from fxkit.transforms.fused_op import FusedOp

TRAINED_CHANNEL_MAJOR_MIN = 1 << 18
"""Weight elements from which a conv of a training graph runs channel-major (`ChannelMajorConv`): the packed
copy channels-last multiplies by is made again after every optimizer step, and ResNet-18's 3x3 weights took
19.5 ms a step to pack, 17 of them in its layer3 and layer4 (weights of 295K to 2.4M elements)."""
NARROW_CHANNELS = 32
"""Input channels under which `Im2colConv` copies its windows with numpy: numba's gather against numpy's
copy (batch 8) took 0.042 against 0.027 ms at 10 channels (LeNet's second conv), 0.22 against 0.16 ms at
16 channels of 28x28, 0.27 against 0.26 at 32, 0.42 against 0.48 at 64."""
COLUMN_BLOCK_BYTES = 1 << 22
"""Bytes of columns an `Im2colConv` gathers and multiplies at a time (4 MiB): ResNet-18's layer1 3x3 conv at
batch 8 took 16.4, 14.9, 12.5, 13.4 and 16.0 ms in blocks of 1, 2, 4, 8 and 16 MiB, and 16.0 ms with all
58 MB of its columns at once (reference machine, 2 threads; PyTorch 9.4 ms, the products alone 9.8 ms)."""
NARROW_INPUT_CHANNELS = 4
"""Input channels (an image's 1 or 3) up to which a conv of at most 32 output channels, or of one image, keeps
numpy's conv2d: channels-last columns copy runs of ``channels * kw`` values where numpy's per-image NCHW columns
copy whole output rows. MobileNet's and EfficientNet's 3->32 3x3 stride-2 stem at 224x224 took 0.64 and
4.9 ms (batch 1, 8) against numpy's 0.39 and 3.0; LeNet's 1->10 5x5 at batch 8 0.18 against 0.07; VGG's
3->64 3x3 at batch 1 2.5 against 1.8. With 64 output channels at batch 8 the channels-last product wins
(ResNet's 7x7 stride-2 stem at 224x224: 13.9 against 15.3 ms), and from 16 input channels on it wins even at
4-6 output channels (0.68 against 0.79 ms for 64->4 at 16x16, batch 8)."""
WIDE_OUTPUT_PIXELS_PER_CHANNEL = 4
"""A conv wider than 1x1 runs channel-major when its output channels are at least this many times its output
pixels (all images): 512 channels over 16 or 32 pixels (VGG-11's 4x4 maps at batch 1, ResNet-18's 2x2 at
batch 8) took 0.69 and 0.85 ms against channels-last im2col's 0.83 and 1.16 ms; at 256 channels over 128
pixels channels-last still won (0.77 against 0.84 ms)."""
POOL = 2
"""Outputs kept per conv call: two let ``y = f(x)`` in a loop alternate without allocating."""
_FREE = 3  # references to a free pooled buffer inside `take`: the pool, the loop variable, getrefcount's argument
_FLOATS = ("float32", "float64")


_SCRATCH = []
_SCRATCH_LOCK = threading.Lock()


def scratch(shape, dtype):
    """A C-contiguous ``shape`` view of a flat buffer shared by every conv call, which nothing else refers to.

    Columns are dead once their product is computed, so the convs of all compiled
    modules share a few buffers (as many as calls hold at once: one an im2col, two a
    Winograd conv), and the memory
    they touch stays in cache, as numpy's allocator gives each eager conv the
    block the last one freed. Columns kept per call site made the working set the
    sum of every conv's columns: ResNet-18's 56x56 3x3 convs at batch 1 took
    2.3-2.7 ms each in the model, against 2.0-2.2 ms for numpy's conv, and
    1.8-1.9 ms with shared columns (minimum of 15 interleaved forwards).
    """
    size, dtype = math.prod(shape), np.dtype(dtype)
    # NOTE: the lock: threads (DataParallel's replicas) must not both find one buffer free before either holds it.
    with _SCRATCH_LOCK:
        # NOTE: by index: a free buffer's references are the list's and getrefcount's argument (enumerate would
        # keep a third in its cached tuple).
        free = [i for i in range(len(_SCRATCH)) if _SCRATCH[i].dtype == dtype and sys.getrefcount(_SCRATCH[i]) == 2]
        for i in free:
            if _SCRATCH[i].size >= size:
                return _SCRATCH[i][:size].reshape(shape)
        buf = np.empty(size, dtype)
        if free:
            _SCRATCH[free[0]] = buf  # NOTE: a free buffer too small is replaced
        else:
            _SCRATCH.append(buf)
        return buf.reshape(shape)


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


class _ChannelsLast(_ConvCall):
    """A conv computed in channels-last memory: its input read as ``(N, H, W, C)``, its result an
    ``(N, OC, OH, OW)`` view of an ``(N, OH, OW, OC)`` buffer."""

    __slots__ = ("_inputs", "_weight", "_writes", "_packed")

    def __init__(self, name, out_meta):
        n, oc, oh, ow = out_meta.shape
        super().__init__(name, out_meta)
        self.shape = (n, oh, ow, oc)
        self._inputs, self._weight, self._writes, self._packed = [], None, None, None

    def _input(self, x):
        """``x`` as C-contiguous ``(N, H, W, C)``: a view when it already lies so (a channels-last
        conv's or kernel's result), else copied into a reused buffer."""
        rows = x.transpose(0, 2, 3, 1)
        if rows.flags.c_contiguous:
            return rows
        buf = take(self._inputs, rows.shape, rows.dtype)
        np.copyto(buf, rows)
        return buf


class GemmConv(_ChannelsLast):
    """A 1x1, stride-1, unpadded, single-group conv: one ``(N*H*W, C) @ (C, OC)`` product, no im2col."""

    __slots__ = ()

    def __call__(self, x, weight, bias=None, *geometry):
        rows = self._input(x)
        n, h, w, c = rows.shape
        out = self._output()
        flat = out.reshape(n * h * w, -1)
        np.matmul(rows.reshape(n * h * w, c), packed_weight(self, weight, lambda v: v.reshape(v.shape[0], c).T),
                  out=flat)
        if bias is not None:
            flat += bias
        return out.transpose(0, 3, 1, 2)


class Im2colConv(_ChannelsLast):
    """A single-group conv, channels-last, block by block: the windows of about `COLUMN_BLOCK_BYTES` worth of
    output pixels gathered into the shared columns (`scratch`), then their product (and bias) written into
    those pixels' rows of the output while the columns are still in cache.

    The windows are gathered by `fxkit.backends.numba_conv.im2col_nhwc` (on numba's threads when BLAS
    shares them), or, for inputs of fewer than `NARROW_CHANNELS` channels, by numpy's strided copy of a
    padded input, a block of whole images at a time: numba's loop over one channel per tap took 0.30 ms
    for LeNet's first conv at batch 8 where numpy's copy took 0.12 ms."""

    __slots__ = ("pads", "stride", "dilation", "_padded", "_gather")

    def __init__(self, name, out_meta, pads, stride, dilation):
        super().__init__(name, out_meta)
        from fxkit.backends import numba_conv  # NOTE: numba loads only when an im2col conv is lowered
        from fxkit.runtime.blas_threads import share_blas_threads

        self.pads, self.stride, self.dilation = pads, stride, dilation
        self._padded = []
        self._gather = numba_conv.im2col_nhwc_parallel if share_blas_threads() else numba_conv.im2col_nhwc
        numba_conv.warm_im2col(self.dtype)

    def __call__(self, x, weight, bias=None, *geometry):
        oc, c, kh, kw = weight.shape
        wmat = packed_weight(self, weight, lambda v: v.transpose(2, 3, 1, 0).reshape(kh * kw * c, oc))
        return self._multiply(self._input(x), wmat, kh, kw, bias)

    def _multiply(self, rows, wmat, kh, kw, bias):
        """The conv of ``rows`` (``(N, H, W, C)``) by ``wmat`` (``(KH*KW*C, OC)``, taps in window order)."""
        out = self._output()
        flat = out.reshape(-1, wmat.shape[1])
        for first, columns in self.blocks(rows, kh, kw):
            np.matmul(columns, wmat, out=flat[first:first + len(columns)])
            if bias is not None:
                flat[first:first + len(columns)] += bias
        return out.transpose(0, 3, 1, 2)

    def blocks(self, rows, kh, kw):
        """``(first output pixel, columns)``: the windows of ``rows`` ``(N, H, W, C)`` block by block, taps in
        ``(KH, KW, C)`` order."""
        return self._image_blocks(rows, kh, kw) if rows.shape[3] < NARROW_CHANNELS else \
            self._pixel_blocks(rows, kh, kw)

    def _pixel_blocks(self, rows, kh, kw):
        """``(first output pixel, columns)`` for each block of `COLUMN_BLOCK_BYTES`, gathered by numba."""
        _, oh, ow, _ = self.shape
        (pt, _), (pl, _) = self.pads
        taps, pixels = kh * kw * rows.shape[3], rows.shape[0] * oh * ow
        block = max(1, min(pixels, COLUMN_BLOCK_BYTES // (taps * rows.itemsize)))
        columns = scratch((block, taps), rows.dtype)
        for first in range(0, pixels, block):
            count = min(block, pixels - first)
            self._gather(columns[:count], rows, first, oh, ow, kh, kw, *self.stride, pt, pl, *self.dilation)
            yield first, columns[:count]

    def _image_blocks(self, rows, kh, kw):
        """``(first output pixel, columns)`` for each block of whole images (about `COLUMN_BLOCK_BYTES`, one image
        at least), copied by numpy from the windows of a padded input."""
        (pt, pb), (pl, pr) = self.pads
        n, h, w, c = rows.shape
        if pt or pb or pl or pr:
            # NOTE: made with zeros and only the interior written: the border stays zero across calls.
            padded = take(self._padded, (n, pt + h + pb, pl + w + pr, c), rows.dtype, np.zeros)
            padded[:, pt:pt + h, pl:pl + w] = rows
            rows = padded
        _, oh, ow, _ = self.shape
        (sh, sw), (dh, dw) = self.stride, self.dilation
        s_n, s_h, s_w, s_c = rows.strides
        windows = np.lib.stride_tricks.as_strided(rows, (n, oh, ow, kh, kw, c),
                                                  (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c))
        per_image = oh * ow * kh * kw * c
        images = max(1, min(n, COLUMN_BLOCK_BYTES // (per_image * rows.itemsize)))
        columns = scratch((images * oh * ow, kh * kw * c), rows.dtype)
        for start in range(0, n, images):
            count = min(images, n - start)
            block = columns[:count * oh * ow]
            np.copyto(block.reshape(count, oh, ow, kh, kw, c), windows[start:start + count])
            yield start * oh * ow, block


class ChannelMajorConv(_ConvCall):
    """A single-group conv as one ``(OC, C*KH*KW) @ (C*KH*KW, N*OH*OW)`` product: the columns are
    gathered from the input's windows whatever its memory layout, and the result is an
    ``(N, OC, OH, OW)`` view of the ``(OC, N, OH, OW)`` product (no transposing copy). For 1x1 convs with
    fewer output pixels than channels, where BLAS runs this orientation fastest."""

    __slots__ = ("pads", "stride", "dilation", "out_shape", "_padded", "keep_columns", "kept", "_columns")

    def __init__(self, name, out_meta, pads, stride, dilation):
        n, oc, oh, ow = out_meta.shape
        super().__init__(name, out_meta)
        self.shape, self.out_shape = (oc, n * oh * ow), (n, oc, oh, ow)
        self.pads, self.stride, self.dilation = pads, stride, dilation
        self._padded = []
        self.keep_columns, self.kept, self._columns = False, None, []

    def __call__(self, x, weight, bias=None, *geometry):
        oc, _, kh, kw = weight.shape
        n, _, oh, ow = self.out_shape
        own = take(self._columns, (weight[0].size, self.shape[1]), self.dtype) if self.keep_columns else None
        out = self._output()
        if batch_last_wanted((kh, kw), (oh, ow)):
            columns = batch_last_columns(np, batch_last_input(np, x, self.pads), 1, (kh, kw), self.stride,
                                         self.dilation, (oh, ow), own)[0]
            product = runtime_scratch(np, "batch-last product", (oc, oh, ow, n), self.dtype)
            np.matmul(weight.reshape(oc, columns.shape[0]), columns, out=product.reshape(oc, -1))
            out.reshape(oc, n, oh, ow)[...] = product.transpose(0, 3, 1, 2)
        else:
            columns = channel_major_columns(x, kh, kw, self.pads, self.stride, self.dilation, self._padded, own)
            np.matmul(weight.reshape(oc, columns.shape[0]), columns, out=out)
        if own is not None and (columns is own or columns.base is own):
            # NOTE: a weak reference: holding the input would keep it alive past its last use (and out of
            # the pools that would hand its buffer out again).
            self.kept = (weakref.ref(x), WRITES[0], columns)
        if bias is not None:
            out += bias.reshape(oc, 1)
        return out.reshape(oc, n, oh, ow).transpose(1, 0, 2, 3)


def batch_last_wanted(kernel, out_hw):
    """Whether a channel-major conv (and its weight gradient, which must agree: they share columns) orders
    its columns batch-last: windows larger than 1x1 over short output rows, where gathering ``(C, H, W, N)``
    memory moves ``width * N`` values a step instead of ``width`` (`fxkit.runtime.ops.batch_last_columns`;
    ResNet-18's 512-channel 2x2 layer at batch 8: 1.2 against 0.8 ms a forward conv)."""
    return kernel != (1, 1) and has_short_rows(out_hw)


def channel_major_columns(x, kh, kw, pads, stride, dilation, padded_pool, out=None):
    """The windows of ``x`` ``(N, C, H, W)``, any memory layout, as a ``(C*KH*KW, N*OH*OW)`` matrix (taps in a
    weight's order): a view when ``x`` is a 1x1 conv's dense channel-major input, else copied into ``out``
    or the shared columns (`scratch`), through a padded copy of ``x`` kept in ``padded_pool`` when there is
    padding.

    numpy's strided copies, not a numba gather: on ResNet-18's 16x16 to 2x2 maps (runs of 16 to 2 values) a
    numba loop per window row took 0.7-1.5 ms where numpy's copy took 0.44-0.6 ms (batch 8, 64-512 channels).
    """
    (pt, pb), (pl, pr) = pads
    n, c, h, w = x.shape
    if pt or pb or pl or pr:
        # NOTE: made with zeros and only the interior written: the border stays zero across calls.
        padded = take(padded_pool, (c, n, pt + h + pb, pl + w + pr), x.dtype, np.zeros)
        padded[:, :, pt:pt + h, pl:pl + w] = x.transpose(1, 0, 2, 3)
        x = padded.transpose(1, 0, 2, 3)
    (sh, sw), (dh, dw) = stride, dilation
    oh = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
    s_n, s_c, s_h, s_w = x.strides
    windows = np.lib.stride_tricks.as_strided(x, (c, kh, kw, n, oh, ow),
                                              (s_c, s_h * dh, s_w * dw, s_n, s_h * sh, s_w * sw))
    # NOTE: a 1x1 stride-1 conv of channel-major memory (or NCHW at batch 1) reads it as its columns.
    if (kh, kw) == (1, 1) and _dense(windows):
        return windows.reshape(c, n * oh * ow)
    columns = scratch((c * kh * kw, n * oh * ow), x.dtype) if out is None else out
    np.copyto(columns.reshape(c, kh, kw, n, oh, ow), windows)
    return columns


def _dense(windows):
    """Whether a ``(C, 1, 1, N, OH, OW)`` window view is C-contiguous memory (reshaping it copies nothing):
    ResNet-50's 1x1 convs over 14x14 maps copied their whole input (0.67 against numpy's 0.46 ms at
    1024 channels, batch 1, where numpy's conv multiplies the NCHW input as it lies)."""
    return windows[:, 0, 0].flags.c_contiguous


class DepthwiseConv(_ChannelsLast):
    """A depthwise conv (one input channel per filter): `fxkit.backends.numba_conv`'s channels-last kernel."""

    __slots__ = ("arguments", "parallel", "_kernel", "_zeros")

    def __init__(self, name, out_meta, weight_shape, pads, stride, dilation):
        super().__init__(name, out_meta)
        from fxkit.backends import numba_conv  # NOTE: numba loads only when a depthwise conv is lowered

        self.arguments = (*stride, pads[0][0], pads[1][0], *dilation)
        self.parallel = math.prod(self.shape) * math.prod(weight_shape[2:]) >= numba_conv.parallel_min_work()
        self._kernel = numba_conv.depthwise_conv2d_nhwc if self.parallel else numba_conv.depthwise_conv2d_nhwc_serial
        self._zeros = np.zeros(self.shape[-1], self.dtype)
        numba_conv.warm(self.dtype)

    def __call__(self, x, weight, bias=None, *geometry):
        out = self._output()
        taps = packed_weight(self, weight, lambda v: v[:, 0].transpose(1, 2, 0))
        self._kernel(out, self._input(x), taps, self._zeros if bias is None else bias, *self.arguments)
        return out.transpose(0, 3, 1, 2)


def lower_conv2d(node):
    """``(call or None, Decision)`` for a ``conv2d`` node (see the module docstring)."""
    if node.kwargs:
        return None, Decision(node.name, "numpy conv2d", "called with keyword arguments (conv calls are positional)")
    bound = bound_metas(node)
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
        call = DepthwiseConv(f"{node.name}_depthwise", out, weight.shape, pads, stride, dilation)
        threads = "numba's threads" if call.parallel else "one thread (little work)"
        return call, Decision(node.name, "depthwise numba kernel, channels-last",
                              f"groups == in_channels == {channels}: no im2col, vectorised along the "
                              f"channels, {threads}")
    if groups != 1:
        return None, Decision(node.name, "numpy conv2d", f"grouped ({groups} groups) but not depthwise")
    if (kh, kw) == (3, 3) and stride == (1, 1) and dilation == (1, 1) and not _trained(node):
        # NOTE: not in training graphs: the filters would be transformed after every step and the weight gradient
        # could not take the forward's columns (ResNet-18's step at batch 8, 64x64: 40.5 -> 52.6 ms with Winograd).
        from fxkit.backends.winograd_conv import lower_winograd  # NOTE: numba loads only when a 3x3 conv is lowered

        chosen = lower_winograd(node.name, x, out, pads)
        if chosen is not None:
            return chosen
    rows = out.shape[0] * out.shape[2] * out.shape[3]
    if _trained(node) and math.prod(weight.shape) >= TRAINED_CHANNEL_MAJOR_MIN:
        return ChannelMajorConv(f"{node.name}_channel_major", out, pads, stride, dilation), Decision(
            node.name, "im2col, channel-major", f"a training graph's weight of {math.prod(weight.shape)} elements: "
                                                f"one (OC, K) @ (K, pixels) product by the weight as it lies, "
                                                f"which channels-last would repack after every optimizer step")
    if rows < oc and ((kh, kw) == (1, 1) or WIDE_OUTPUT_PIXELS_PER_CHANNEL * rows <= oc):
        return ChannelMajorConv(f"{node.name}_channel_major", out, pads, stride, dilation), Decision(
            node.name, f"{kh}x{kw}, channel-major", f"{rows} output pixels < {oc} channels: one (OC, K) @ (K, pixels) "
                                                    f"product, BLAS's faster orientation for wide outputs")
    if channels <= NARROW_INPUT_CHANNELS and (oc <= 32 or x.shape[0] == 1):
        return None, Decision(node.name, "numpy conv2d", f"{channels} input channels: channels-last columns "
                                                         f"copy runs of {channels * kw} values, numpy's NCHW "
                                                         f"columns runs of {out.shape[3]}")
    if (kh, kw) == (1, 1) and stride == (1, 1) and pads == ((0, 0), (0, 0)):
        return GemmConv(f"{node.name}_gemm", out), Decision(
            node.name, "1x1 GEMM, channels-last", "stride 1, no padding: the input is the column matrix, "
                                                  "one product over all images, no im2col")
    return Im2colConv(f"{node.name}_im2col", out, pads, stride, dilation), Decision(
        node.name, "im2col, channels-last", f"{kh}x{kw} stride {stride}: columns gathered by numba and multiplied "
                                            f"in blocks of {COLUMN_BLOCK_BYTES >> 20} MiB, padding included; "
                                            f"output kept across calls, columns shared")


def _trained(node):
    """Whether this is a conv of a training graph (`fxkit.transforms.grad`), whose weight an optimizer writes
    between calls: its weight also feeds the input gradient's transposed conv, or (a first conv, whose input
    needs no gradient) its input feeds the gradient of a weight of its shape."""
    x, weight = (node.args + (None, None))[:2]
    if any(getattr(user, "target", None) is _CONV_TRANSPOSE2D for user in getattr(weight, "users", ())):
        return True
    weight_meta = getattr(weight, "meta", {}).get("tensor_meta")
    return weight_meta is not None and any(
        getattr(user, "target", None) is _CONV2D_WEIGHT_GRAD and user.args[0] is x
        and tuple(user.args[1]) == tuple(weight_meta.shape) for user in getattr(x, "users", ()))


def reordered_values(nodes, calls):
    """Names of the values whose memory is not in their NCHW shape's order.

    Every call made here (``calls``: node -> call) returns such a value
    (channels-last ``(N, H, W, C)`` memory, or channel-major ``(C, N, H, W)``); an
    elementwise group or op keeps the memory order of an input of its own rank
    (`KernelCall`'s permuted runs, numpy's ufuncs), so the order flows through it,
    into every result of a group with several (a training graph's ReLU and its
    mask), and each item of such a tuple (a pool's values and indices) lies as
    its call made it. The numba backend reads this to price a kernel that would
    broadcast over such a value (`fxkit.backends.cost_model.strided_group`) and
    to run a ``view`` of one as a ``reshape``.
    """
    found = set()
    for node in nodes:
        if node.op != "call":
            continue
        if node in calls:
            found.add(node.name)
        elif node.target is _GETITEM and getattr(node.args[0], "name", None) in found:
            found.add(node.name)
        elif isinstance(node.target, FusedOp) or getattr(node.target, "kind", None) == "elementwise":
            out = node.meta.get("tensor_meta")
            metas = (out,) if isinstance(out, TensorMeta) else out if isinstance(out, tuple) else ()
            ranks = {len(m.shape) for m in metas if isinstance(m, TensorMeta)}
            if any(getattr(a, "name", None) in found and isinstance(a.meta.get("tensor_meta"), TensorMeta)
                   and len(a.meta["tensor_meta"].shape) in ranks for a in node.args):
                found.add(node.name)
    return found


_CONV_TRANSPOSE2D = get_op("conv_transpose2d")
_CONV2D_WEIGHT_GRAD = get_op("conv2d_weight_grad")
_GETITEM = get_op("getitem")
CONV_RULES = {get_op("conv2d"): lower_conv2d}
"""Registry op -> ``rule(node) -> (call or None, Decision)``: how the numba backend runs that op."""
