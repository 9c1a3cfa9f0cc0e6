"""`equalize`: cross-layer equalization of a prepared model before calibration.

Two quantized layers in a row, ``A -> (ReLU) -> B``, compute the same function
when output channel ``i`` of A (its weight row and bias) is divided by
``s_i > 0`` and input channel ``i`` of B is multiplied by it: ReLU commutes with
a positive scale. Cross-layer equalization (Nagel et al., "Data-Free
Quantization through Weight Equalization and Bias Correction", 2019, section
4.1) picks ``s_i = sqrt(r1_i / r2_i)``, where ``r1_i`` is the largest magnitude
of A's output channel ``i`` and ``r2_i`` that of B's input channel ``i``: both
become ``sqrt(r1_i * r2_i)``, so that no channel of either weight is small
against the range its quantization grid has to cover (per-tensor grids, B's
input channels under a per-output-channel grid, a depthwise layer's channels).
Chains ``A -> B -> C`` are equalized pair by pair, repeatedly, until the scales
settle.

ReLU6 is not scale-equivariant: ``relu6(x / s) != relu6(x) / s`` where ``x``
passes 6 (or ``6 s``). As the paper does for MobileNetV2, ``relu6="relu"``
replaces the ReLU6 between an equalized pair by ReLU, which changes the model
only where a pre-activation exceeds 6; ``relu6="skip"`` leaves such pairs alone.

Before::

    %conv_a = call[conv2d](%obs_0, %a_weight, %a_bias)      # channel ranges 0.01 .. 4
    %relu   = call[relu](%conv_a)
    %obs_1  = call[self.activation_post_process_1](%relu)
    %conv_b = call[conv2d](%obs_1, %b_weight, %b_bias)

after: the same graph; ``a_weight``, ``a_bias`` and ``b_weight`` rescaled per channel.

Example:
    >>> prepared = equalize(prepare(gm, per_channel_histogram_qconfig))
    >>> calibrate(prepared, batches)
    >>> quantized = convert(prepared)
"""
from typing import NamedTuple

import numpy as np

from fxkit.errors import GraphError
from fxkit.runtime.registry import get_op
from fxkit.transforms.quantize.patterns import is_observer_call, is_relu, is_relu6, layer_parameters

_RELU = get_op("relu")


class EqualizedPair(NamedTuple):
    """Two layers `equalize` rescaled against each other, and the activation between them."""

    first: str
    second: str
    activation: str


def equalize(prepared, iterations=20, relu6="relu"):
    """Equalize the weight ranges of consecutive quantized layers of ``prepared``, in place.

    Args:
        prepared: a GraphModule from `prepare`, not yet calibrated (the activation ranges
            change).
        iterations: passes over all pairs (a chain's scales depend on each other).
        relu6: ``"relu"``: equalize across a ReLU6 and make it a ReLU (exact wherever the
            pre-activation stays at most 6); ``"skip"``: leave pairs with a ReLU6 between them.

    Returns:
        ``prepared``; ``prepared.equalized_pairs`` lists the `EqualizedPair` s.

    Raises:
        GraphError: ``relu6`` is neither option, or an observer has already seen data.
    """
    if relu6 not in ("relu", "skip"):
        raise GraphError(f"equalize: relu6 must be 'relu' or 'skip', got {relu6!r}")
    calibrated = [n.name for n in prepared.graph.nodes
                  if is_observer_call(prepared, n) and prepared.get_submodule(n.target).calibrated]
    if calibrated:
        raise GraphError(f"equalize: observers {', '.join(calibrated[:4])} have already seen data; equalize "
                         f"changes the activation ranges: call it between prepare and calibrate")
    pairs = [p for p in _pairs(prepared) if relu6 == "relu" or p[2] != "relu6"]
    for first, second, activation in pairs:
        if activation == "relu6":
            _relu6_to_relu(prepared, first)
    arrays = [(_weights(prepared, first), _weights(prepared, second)) for first, second, _ in pairs]
    for _ in range(iterations):
        for ((w1, b1), (w2, _)), (_, second, _) in zip(arrays, pairs):
            _equalize_pair(w1, b1, w2, layer_parameters(prepared, second).get("groups", 1))
    prepared.equalized_pairs = [EqualizedPair(_name(a), _name(b), act) for a, b, act in pairs]
    return prepared


def _pairs(gm):
    """``(first, second, activation)`` for each quantized layer read only (through its observer)
    by another quantized layer as input; activation is ``"none"``, ``"relu"`` or ``"relu6"``."""
    pairs = []
    for first in gm.graph.nodes:
        info = first.meta.get("quantize") or {}
        if info.get("qconfig") is None:
            continue
        out = next(u for u in first.users if u.name == info["fused_relu"]) if info["fused_relu"] else first
        users = list(out.users)
        if len(users) != 1 or not is_observer_call(gm, users[0]):
            continue
        readers = list(users[0].users)
        if len(readers) != 1:
            continue
        second = readers[0]
        if (second.meta.get("quantize") or {}).get("qconfig") is None or second.args[0] is not users[0]:
            continue
        if info["kind"] != second.meta["quantize"]["kind"]:
            continue
        activation = "none" if out is first else ("relu" if is_relu(gm, out) else "relu6")
        pairs.append((first, second, activation))
    return pairs


def _relu6_to_relu(gm, first):
    info = first.meta["quantize"]
    old = next(u for u in first.users if u.name == info["fused_relu"])
    if not is_relu6(gm, old):
        return
    with gm.graph.inserting_after(old):
        new = gm.graph.call(_RELU, (first,), name=f"{old.name}_relu")
    new.meta["stack"] = old.meta.get("stack")
    old.replace_all_uses_with(new)
    gm.graph.erase_node(old)
    info["fused_relu"] = new.name
    gm.recompile()


def _weights(gm, layer):
    """The layer's weight and bias as numpy arrays sharing memory with its parameters (bias None)."""
    params = layer_parameters(gm, layer)
    bias = params["bias"]
    return params["weight"].numpy(), None if bias is None else bias.numpy()


def _equalize_pair(w1, b1, w2, groups):
    """Rescale output channel ``i`` of ``w1``/``b1`` by ``1 / s_i`` and input channel ``i`` of ``w2``
    (``groups`` groups) by ``s_i``, ``s_i = sqrt(r1_i / r2_i)``, in place."""
    channels = w1.shape[0]
    r1 = np.abs(w1.reshape(channels, -1)).max(1).astype(np.float64)
    out2, per_in = w2.shape[0], w2.shape[1]
    grouped = w2.reshape(groups, out2 // groups, per_in, -1)  # a copy when w2 is not contiguous
    r2 = np.abs(grouped).max(axis=(1, 3)).reshape(-1).astype(np.float64)
    if r2.shape[0] != channels:
        raise GraphError(f"equalize: a layer with {channels} output channels feeds one reading {r2.shape[0]}")
    s = np.ones(channels)
    valid = (r1 > 0) & (r2 > 0)
    s[valid] = np.sqrt(r1[valid] / r2[valid])
    w1 /= s.reshape((channels,) + (1,) * (w1.ndim - 1)).astype(w1.dtype)
    if b1 is not None:
        b1 /= s.astype(b1.dtype)
    w2[...] = (grouped * s.reshape(groups, 1, per_in, 1).astype(w2.dtype)).reshape(w2.shape)


def _name(node):
    return node.meta["quantize"].get("module") or node.name
