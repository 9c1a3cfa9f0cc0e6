"""`round_weights`: round each layer's weight to int8 so that its output moves least (GPTQ).

Rounding every weight to the nearest grid point minimises the weight's own
error, not the error of the layer's output ``W x``. GPTQ (Frantar et al.,
"GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
Transformers", 2023; the Optimal Brain Quantizer of Frantar and Alistarh, 2022)
rounds the input columns of ``W`` one at a time and spreads each column's
rounding error over the columns not yet rounded, weighted by the inverse of
``H = E[x x^T]`` of the layer's calibration inputs: the output error on those
inputs is (close to) least squares instead of accumulating at random.

The grid is the qconfig's weight observer on the original weight (per channel
or per tensor, its integer range); it is recorded as
``meta["quantize"]["weight_qparams"]`` and the weight parameter is replaced by
its rounded values, so the prepared model computes what the int8 model will
and `convert` stores exactly these integers. Convolutions use the im2col view
(columns ``(c, ky, kx)`` of each group).

Example:
    >>> calibrate(prepared, batches)
    >>> round_weights(prepared, batches)     # before correct_bias, if both are used
    >>> quantized = convert(prepared)
"""
import numpy as np

from fxkit.errors import GraphError
from fxkit.graph import Interpreter
from fxkit.runtime.autograd import no_grad
from fxkit.transforms.quantize.calibrate import batch_arguments
from fxkit.transforms.quantize.observers import PER_TENSOR
from fxkit.transforms.quantize.patterns import is_observer_call, layer_parameters, submodule


def round_weights(prepared, data, damping=0.01, block=128):
    """Round the weight of every quantized layer of ``prepared`` by GPTQ on ``data``.

    Args:
        prepared: a GraphModule from `prepare` (post-training quantization).
        data: calibration batches, as for `calibrate`.
        damping: added to the diagonal of ``H``, as a fraction of its mean (keeps the
            inverse stable when inputs are correlated or channels are dead).
        block: columns rounded between two updates of the rest (speed only).

    Returns:
        ``prepared``, its layer weights replaced in place by their rounded values.

    Raises:
        GraphError: the model was prepared for quantization-aware training, or a batch
            does not fit its inputs.
    """
    graph = prepared.graph
    layers = [n for n in graph.nodes if (n.meta.get("quantize") or {}).get("qconfig") is not None]
    if any(layer_parameters(prepared, n)["weight_fake_quant"] is not None for n in layers):
        raise GraphError("round_weights: the model was prepared for quantization-aware training (its weights have "
                         "fake quantizers), which learns its weights; use prepare for post-training quantization")
    names = [n.name for n in graph.nodes if n.op == "placeholder"]
    hessians = _input_products(prepared, layers, [batch_arguments(b, names, i) for i, b in enumerate(data)])
    for node in layers:
        _round_layer(prepared, node, hessians[node], damping, block)
    return prepared


def _input_products(gm, layers, batches):
    """``{layer: [H of each group]}``: the float64 sums of ``x x^T`` over every input row."""
    collector = _InputProducts(gm, set(layers))
    observers = [submodule(gm, n) for n in gm.graph.nodes if is_observer_call(gm, n)]
    states = [m.enabled for m in observers]
    for module in observers:
        module.enabled = False
    try:
        with no_grad():
            for batch in batches:
                collector.run(*batch)
    finally:
        for module, state in zip(observers, states):
            module.enabled = state
    return collector.products


class _InputProducts(Interpreter):
    def __init__(self, gm, layers):
        super().__init__(gm)
        self.layers = layers
        self.products = {}

    def run_node(self, n):
        if n in self.layers:
            rows = _input_rows(self.module, n, np.asarray(self.env[n.args[0]].numpy(), np.float64))
            sums = [r.T @ r for r in rows]
            old = self.products.get(n)
            self.products[n] = sums if old is None else [a + b for a, b in zip(old, sums)]
        return super().run_node(n)


def _input_rows(gm, node, x):
    """The layer's input as the rows its weight multiplies: one ``(rows, K)`` array per group."""
    params = layer_parameters(gm, node)
    if node.meta["quantize"]["kind"] == "linear":
        return [x.reshape(-1, x.shape[-1])]
    kh, kw = params["weight"].shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = params["stride"], params["padding"], params["dilation"]
    padded = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]  # (N, C, OH, OW, kh, kw)
    groups = params["groups"]
    per_group = x.shape[1] // groups
    rows = []
    for g in range(groups):
        part = windows[:, g * per_group:(g + 1) * per_group]
        rows.append(part.transpose(0, 2, 3, 1, 4, 5).reshape(-1, per_group * kh * kw))
    return rows


def _round_layer(gm, node, hessians, damping, block):
    info = node.meta["quantize"]
    weight = layer_parameters(gm, node)["weight"]
    w = np.asarray(weight.numpy(), np.float64)
    observer = info["qconfig"].weight()
    observer(weight.detach())
    scale, zero_point = observer.calculate_qparams()
    info["weight_qparams"] = (scale, zero_point)
    per_channel = observer.qscheme not in PER_TENSOR
    n_out = w.shape[0]
    scale = np.broadcast_to(np.asarray(scale, np.float64), (n_out,)) if per_channel else np.full(n_out, scale)
    zero_point = np.broadcast_to(np.asarray(zero_point, np.float64), (n_out,)) if per_channel else np.full(n_out,
                                                                                                          zero_point)
    rows = w.reshape(n_out, -1)
    per_group = n_out // len(hessians)
    rounded = np.empty_like(rows)
    for g, hessian in enumerate(hessians):
        part = slice(g * per_group, (g + 1) * per_group)
        rounded[part] = _gptq(rows[part], hessian, scale[part, None], zero_point[part, None], observer.quant_min,
                              observer.quant_max, damping, block)
    weight._data[...] = rounded.reshape(w.shape).astype(weight._data.dtype)


def _gptq(w, hessian, scale, zero_point, qmin, qmax, damping, block):
    """GPTQ's rounding of the rows ``w`` (out, K) given ``hessian`` (K, K) of their inputs."""
    w = w.copy()
    h = hessian.copy()
    dead = np.diag(h) == 0
    h[dead, dead] = 1
    w[:, dead] = 0
    h[np.diag_indices_from(h)] += damping * np.mean(np.diag(h))
    # the upper Cholesky factor of H^-1: row i holds how column i's error moves the later columns
    upper = np.linalg.cholesky(np.linalg.inv(h)).T
    out = np.empty_like(w)
    k = w.shape[1]
    for start in range(0, k, block):
        end = min(start + block, k)
        errors = np.empty((w.shape[0], end - start))
        for i in range(start, end):
            column = w[:, i:i + 1]
            q = (np.clip(np.rint(column / scale) + zero_point, qmin, qmax) - zero_point) * scale
            out[:, i:i + 1] = q
            error = (column - q) / upper[i, i]
            w[:, i + 1:end] -= error * upper[i, i + 1:end]
            errors[:, i - start:i - start + 1] = error
        w[:, end:] -= errors @ upper[start:end, end:]
    return out
