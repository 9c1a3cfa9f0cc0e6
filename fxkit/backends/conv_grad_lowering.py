"""How the numba backend runs a convolution's gradients: ``conv2d_weight_grad`` and ``conv_transpose2d``.

A training graph (`fxkit.transforms.grad`) computes each conv's weight
gradient with ``conv2d_weight_grad`` and its input gradient with
``conv_transpose2d`` of the output's gradient. Eager's implementations copy
the windows with numpy's strided copies and add each tap's contribution back
with one strided add per tap; on ResNet-18's 16x16 to 2x2 maps (64x64
inputs, batch 8) those copies run over rows of 16 to 2 values and took two to
three times as long as the products (a training step's 19 weight gradients
35.6 ms, its 16 input gradients 30.6 ms, on the reference machine).

Both become one product over **channel-major columns**, ``(C*KH*KW, N*OH*OW)``
with the taps in the weight's own order (`fxkit.backends.numba_conv`):

* **weight gradient**: ``grad (OC, N*OH*OW) @ columns.T`` is the weight's
  ``(OC, C*KH*KW)`` matrix: the result is the weight's shape as it lies, no
  transposing copy (a 512x512x3x3 gradient is 9.4 MB);
* **transposed conv** (an input gradient, or a decoder's upsampling):
  ``weight.T @ input (C_in, N*H*W)`` gives every input pixel's contribution to
  each tap, and `col2im_channel_major` adds them into the output planes,
  padding dropped. The weight is read as it lies, so an
  optimizer's in-place step costs no repacking.

Either reads its operands in any memory layout (a channels-last conv result
included) and returns C-contiguous memory in its shape's order, so the values
after it are not reordered. Grouped convolutions, other ranks and dtypes keep
the eager op; every choice is a `Decision` that ``explain()`` prints.
"""
import math

import numpy as np

from fxkit.backends import conv_lowering
from fxkit.backends.bound_arguments import bound_metas
from fxkit.backends.conv_lowering import (ChannelMajorConv, Im2colConv, _ConvCall, batch_last_wanted,
                                          channel_major_columns, scratch, take)
from fxkit.backends.cost_model import Decision
from fxkit.backends.packed_weight import packed_weight
from fxkit.runtime.autograd.autograd_meta import WRITES
from fxkit.runtime.autograd.backward_ops import conv_pads
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.batch_last_columns import (batch_last_columns, batch_last_input, batch_last_rows,
                                                  col2im_batch_last, has_short_rows)
from fxkit.runtime.ops.conv import ntuple
from fxkit.runtime.registry import get_op

_FLOATS = ("float32", "float64")


def channel_major(x):
    """``x`` ``(N, C, H, W)`` as a C-contiguous ``(C, N*H*W)`` matrix: a view when its memory already lies so,
    else copied into the shared scratch (`fxkit.backends.conv_lowering.scratch`)."""
    n, c, h, w = x.shape
    planes = x.transpose(1, 0, 2, 3)
    if planes.flags.c_contiguous:
        return planes.reshape(c, n * h * w)
    buf = scratch((c, n, h, w), x.dtype)
    np.copyto(buf, planes)
    return buf.reshape(c, n * h * w)


class WeightGradConv(_ConvCall):
    """``conv2d_weight_grad``: channel-major columns of the input, one ``(OC, N*OH*OW) @ (N*OH*OW, C*KH*KW)``
    product straight into the weight-shaped result."""

    __slots__ = ("pads", "stride", "dilation", "_padded", "forward")
    in_shape_order = True

    def __init__(self, name, out_meta, pads, stride, dilation):
        super().__init__(name, out_meta)
        self.pads, self.stride, self.dilation = pads, stride, dilation
        self._padded = []
        self.forward = None  # the forward conv's `ChannelMajorConv` when it keeps these columns (`share_columns`)

    def __call__(self, x, weight_size, grad_output, *geometry):
        oc, c, kh, kw = self.shape
        oh, ow = grad_output.shape[2:]
        batch_last = batch_last_wanted((kh, kw), (oh, ow))  # the forward's order, when it hands its columns over
        columns = self._forward_columns(x)
        if columns is None and batch_last:
            columns = batch_last_columns(np, batch_last_input(np, x, self.pads), 1, (kh, kw), self.stride,
                                         self.dilation, (oh, ow))[0]
        elif columns is None:
            columns = channel_major_columns(x, kh, kw, self.pads, self.stride, self.dilation, self._padded)
        rows = batch_last_rows(np, grad_output, 1)[0] if batch_last else channel_major(grad_output)
        out = self._output()  # NOTE: a gradient the optimizer still holds is never handed out again (`take`)
        np.matmul(rows, columns.T, out=out.reshape(oc, c * kh * kw))
        return out

    def _forward_columns(self, x):
        """The columns the forward conv gathered from this very ``x``, unwritten since, or None; handed over
        once (the forward's buffer is then free for its next call)."""
        forward = self.forward
        kept = forward.kept if forward is not None else None
        if kept is None:
            return None
        forward.kept = None
        source, writes, columns = kept
        return columns if source() is x and writes == WRITES[0] else None


def share_columns(graph, calls):
    """Let each channel-major weight gradient (`WeightGradConv`) take the columns its forward conv gathered:
    a ``conv2d`` node of the same input and geometry, run channel-major (``calls``: node -> call). Its
    columns are then kept in a buffer of the forward call's own until the gradient reads them: ResNet-18's
    layer3 and layer4 gathered each twice (0.55-0.75 ms a gather at batch 8, 64x64)."""
    forwards = {}
    for node in graph.nodes:
        call = calls.get(node)
        if node.op == "call" and node.target is _CONV2D and isinstance(call, ChannelMajorConv) and \
                len(node.args) >= 2 and not node.kwargs:
            forwards.setdefault(_columns_key(node.args[0], node.args[1].meta.get("tensor_meta"), node.args[3:]),
                                call)
    for node in graph.nodes:
        call = calls.get(node)
        if isinstance(call, WeightGradConv) and not node.kwargs:
            forward = forwards.get(_columns_key(node.args[0], tuple(node.args[1]), node.args[3:]))
            if forward is not None and (forward.pads, forward.stride, forward.dilation) == \
                    (call.pads, call.stride, call.dilation):
                forward.keep_columns, call.forward = True, forward


def _columns_key(x, weight, geometry):
    """What fixes a conv's columns: its input node, its weight's shape, stride, padding, dilation, groups."""
    shape = tuple(weight.shape) if isinstance(weight, TensorMeta) else tuple(weight)
    return x, shape, tuple(tuple(g) if isinstance(g, (list, tuple)) else g for g in geometry)


class WeightGradChannelsLast(_ConvCall):
    """``conv2d_weight_grad`` of a small weight: the input's channels-last windows gathered block by block
    (`Im2colConv.blocks`, numba's gather) and ``(OC, pixels) @ (pixels, KH*KW*C)`` products summed into
    ``(OC, KH, KW, C)``, transposed once into the weight's order at the end. The channel-major columns'
    numpy gather took 0.7-0.95 ms a layer on ResNet-18's maps at batch 8, 64x64 (runs of 2 to 16 values);
    the closing transpose costs a weight-sized copy, so large weights keep `WeightGradConv`."""

    __slots__ = ("_gather", "_partial")
    in_shape_order = True

    def __init__(self, name, out_meta, grad_meta, pads, stride, dilation):
        super().__init__(name, out_meta)
        self._gather = Im2colConv(f"{name}_gather", grad_meta, pads, stride, dilation)
        self._partial = []

    def __call__(self, x, weight_size, grad_output, *geometry):
        oc, c, kh, kw = self.shape
        rows = self._gather._input(x)
        g = grad_output.transpose(0, 2, 3, 1)
        g = (g if g.flags.c_contiguous else np.ascontiguousarray(g)).reshape(-1, oc)
        taps = take(self._partial, (2, oc, kh * kw * c), self.dtype)
        total, partial = taps[0], taps[1]
        for first, columns in self._gather.blocks(rows, kh, kw):
            np.matmul(g[first:first + len(columns)].T, columns, out=partial if first else total)
            if first:
                total += partial
        out = self._output()  # NOTE: a gradient the optimizer still holds is never handed out again (`take`)
        np.copyto(out, total.reshape(oc, kh, kw, c).transpose(0, 3, 1, 2))
        return out


class TransposedConvChannelsLast(Im2colConv):
    """A stride-1 ``conv_transpose2d`` of a small weight as the conv it is, ``conv2d(x, W', padding=d*(k-1)-p)``
    with ``W'[o, i, a, b] = weight[i, o, k-1-a, k-1-b]``, run channels-last by `Im2colConv` (a gathered block,
    one product, no col2im): a stride-1 conv's input gradient, whose output gradient lies channels-last. The
    flipped weight is repacked after each optimizer step (`packed_weight`), hence small weights only
    (`fxkit.backends.conv_lowering.TRAINED_CHANNEL_MAJOR_MIN`)."""

    __slots__ = ()

    def __call__(self, x, weight, bias=None, *geometry):
        c_in, c_out, kh, kw = weight.shape
        wmat = packed_weight(self, weight, lambda v: v[:, :, ::-1, ::-1].transpose(2, 3, 0, 1)
                             .reshape(kh * kw * c_in, c_out))
        return self._multiply(self._input(x), wmat, kh, kw, bias)


class TransposedConv(_ConvCall):
    """``conv_transpose2d`` (single group): one ``(C_out*KH*KW, C_in) @ (C_in, N*H*W)`` product into the shared
    columns, then `col2im_channel_major` into the output's planes."""

    __slots__ = ("geometry", "_scatter")
    in_shape_order = True

    def __init__(self, name, out_meta, geometry):
        super().__init__(name, out_meta)
        from fxkit.backends import numba_conv  # NOTE: numba loads only when a transposed conv is lowered

        self.geometry = geometry  # (sh, sw, ph, pw, dh, dw)
        numba_conv.warm_col2im(self.dtype)
        self._scatter = numba_conv.col2im_channel_major

    def __call__(self, x, weight, bias=None, *geometry):
        n, c_in, h, w = x.shape
        _, c_out, kh, kw = weight.shape
        sh, sw, ph, pw, dh, dw = self.geometry
        if (sh, sw) == (1, 1) and has_short_rows((h, w)):
            # numpy's adds over batch-last memory beat the numba scatter on small maps, stride 1 (ResNet-18's
            # 512-channel 2x2 layer at batch 8: 1.0 against 1.3 ms); strided, the scatter keeps 0.6-0.75 ms
            # against 0.65-0.95 ms.
            wmat = weight.reshape(1, c_in, c_out * kh * kw).transpose(0, 2, 1)
            out = col2im_batch_last(np, x, wmat, c_out, (kh, kw), (sh, sw), (ph, pw), (dh, dw), self.shape[2:],
                                    self._output())
            if bias is not None:
                out += bias.reshape(c_out, 1, 1)
            return out
        columns = scratch((c_out * kh * kw, n * h * w), self.dtype)
        np.matmul(weight.reshape(c_in, c_out * kh * kw).T, channel_major(x), out=columns)
        out = self._output()
        self._scatter(out, columns.reshape(c_out * kh * kw, n * h, w), kh, kw, *self.geometry)
        if bias is not None:
            out += bias.reshape(c_out, 1, 1)
        return out


def _metas(node):
    """``(bound arguments, None)``, each tensor argument as its TensorMeta, or ``(None, why)``."""
    if node.kwargs:
        return None, "called with keyword arguments (conv calls are positional)"
    return bound_metas(node), None


def _usable(tensors, out, groups):
    """Why the eager op must run (a sentence), or None when the rule can take the node."""
    if not all(isinstance(m, TensorMeta) for m in tensors + [out]):
        return "an operand's metadata is unknown"
    if any(len(m.shape) != 4 for m in tensors[:2]) or len(out.shape) != 4:
        return "not a batched 2-D convolution"
    if not all(isinstance(d, int) for m in tensors + [out] for d in m.shape):
        return "symbolic shapes"
    if tensors[0].dtype.name not in _FLOATS or any(m.dtype != tensors[0].dtype for m in tensors):
        return f"{tensors[0].dtype.name} operands (rules take float32/float64, one dtype)"
    if groups != 1:
        return f"{groups} groups"
    return None


def lower_conv2d_weight_grad(node):
    """``(call or None, Decision)`` for a ``conv2d_weight_grad`` node."""
    eager = f"numpy {node.target.name}"
    bound, why = _metas(node)
    if bound is None:
        return None, Decision(node.name, eager, why)
    x, grad, size = bound["input"], bound["grad_output"], tuple(bound["weight_size"])
    out = node.meta.get("tensor_meta")
    groups = bound.get("groups", 1)
    why = "a 3-D convolution's weight" if len(size) != 4 else _usable([x, grad], out, groups)
    if why is not None:
        return None, Decision(node.name, eager, why)
    kernel = size[2:]
    stride = ntuple(bound.get("stride", 1), 2, "conv2d", "stride")
    dilation = ntuple(bound.get("dilation", 1), 2, "conv2d", "dilation")
    pads = conv_pads(bound.get("padding", 0), kernel, dilation)
    if math.prod(size) < conv_lowering.TRAINED_CHANNEL_MAJOR_MIN:
        call = WeightGradChannelsLast(f"{node.name}_channels_last", out, grad, pads, stride, dilation)
        return call, Decision(node.name, "weight gradient, channels-last columns",
                              f"{kernel[0]}x{kernel[1]} stride {stride}: windows gathered by numba block by block, "
                              f"products summed, the {math.prod(size)}-element result transposed once")
    call = WeightGradConv(f"{node.name}_columns", out, pads, stride, dilation)
    return call, Decision(node.name, "weight gradient, channel-major columns",
                          f"{kernel[0]}x{kernel[1]} stride {stride}: columns in the weight's order, one product "
                          f"gives the weight-shaped gradient")


def lower_conv_transpose2d(node):
    """``(call or None, Decision)`` for a ``conv_transpose2d`` node."""
    eager = "numpy conv_transpose2d"
    bound, why = _metas(node)
    if bound is None:
        return None, Decision(node.name, eager, why)
    x, weight, bias = bound["input"], bound["weight"], bound.get("bias")
    out = node.meta.get("tensor_meta")
    why = _usable([x, weight] + ([bias] if bias is not None else []), out, bound.get("groups", 1))
    if why is not None:
        return None, Decision(node.name, eager, why)
    kernel = tuple(weight.shape[2:])
    stride = ntuple(bound.get("stride", 1), 2, "conv_transpose2d", "stride")
    padding = ntuple(bound.get("padding", 0), 2, "conv_transpose2d", "padding")
    dilation = ntuple(bound.get("dilation", 1), 2, "conv_transpose2d", "dilation")
    reach = [d * (k - 1) - p for d, k, p in zip(dilation, kernel, padding)]
    if stride == (1, 1) and min(reach) >= 0 and math.prod(weight.shape) < conv_lowering.TRAINED_CHANNEL_MAJOR_MIN:
        output_padding = ntuple(bound.get("output_padding", 0), 2, "conv_transpose2d", "output_padding")
        pads = tuple((r, r + extra) for r, extra in zip(reach, output_padding))
        call = TransposedConvChannelsLast(f"{node.name}_as_conv", out, pads, (1, 1), dilation)
        return call, Decision(node.name, "transposed conv as a conv, channels-last",
                              f"{kernel[0]}x{kernel[1]} stride 1: the flipped weight's conv, gathered by numba "
                              f"block by block, no col2im")
    call = TransposedConv(f"{node.name}_col2im", out, (*stride, *padding, *dilation))
    return call, Decision(node.name, "transposed conv, channel-major col2im",
                          f"{kernel[0]}x{kernel[1]} stride {stride}: one product, then numba adds each tap "
                          f"into the output planes")


_CONV2D = get_op("conv2d")
GRAD_CONV_RULES = {get_op("conv2d_weight_grad"): lower_conv2d_weight_grad,
                   get_op("conv_transpose2d"): lower_conv_transpose2d}
"""Registry op -> ``rule(node) -> (call or None, Decision)``; results lie in their shape's order where the call's
``in_shape_order`` says so, else channels-last (`TransposedConvChannelsLast`)."""
