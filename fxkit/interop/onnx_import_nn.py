"""ONNX import rules of the activations, normalisations, ordering and rearranging ops added for
imported models: ``HardSigmoid``, ``HardSwish``, ``Mish``, ``InstanceNormalization``,
``GroupNormalization``, ``TopK``, ``DepthToSpace`` and ``SpaceToDepth``, each onto its registry op."""
from fxkit.interop.onnx_import_rules import import_rule, refuse

_ONE_SIXTH = 1.0 / 6.0


@import_rule("HardSwish", "Mish")
def _activation(c):
    return c.call(c.op_type.lower(), c.tensor(0))


@import_rule("HardSigmoid")
def _hardsigmoid(c):
    alpha, beta = float(c.attr("alpha", 0.2)), float(c.attr("beta", 0.5))
    if abs(alpha - _ONE_SIXTH) < 1e-7 and beta == 0.5:
        return c.call("hardsigmoid", c.tensor(0))  # PyTorch's (and Keras') hard sigmoid
    # ONNX's general form max(0, min(1, alpha * x + beta)) (its default alpha is 0.2)
    return c.call("clamp", c.call("add", c.call("mul", c.tensor(0), alpha), beta), 0.0, 1.0)


@import_rule("InstanceNormalization")
def _instance_norm(c):
    return c.call("instance_norm", c.tensor(0), None, None, c.tensor(1), c.tensor(2), True, 0.1,
                  float(c.attr("epsilon", 1e-5)))


@import_rule("GroupNormalization")
def _group_norm(c):
    # NOTE: opset 18's per-group scale and bias were deprecated by opset 21 (onnx's checker refuses them)
    if c.opset < 21:
        raise refuse(c, "GroupNormalization before opset 21 (scale and bias per group)")
    if c.attr("stash_type", 1) != 1:
        raise refuse(c, "GroupNormalization with stash_type other than float32")
    return c.call("group_norm", c.tensor(0), int(c.attr("num_groups")), c.tensor(1), c.tensor(2),
                  float(c.attr("epsilon", 1e-5)))


@import_rule("TopK")
def _topk(c):
    if c.opset < 10:
        raise refuse(c, "TopK before opset 10 (k as an attribute)")
    result = c.call("topk", c.tensor(0), int(c.scalar(1)), c.attr("axis", -1), bool(c.attr("largest", 1)),
                    bool(c.attr("sorted", 1)))
    return [c.call("getitem", result, i) for i in range(2)]


@import_rule("DepthToSpace", "SpaceToDepth")
def _depth_space(c):
    """``pixel_shuffle`` (DepthToSpace, ``CRD``) and ``pixel_unshuffle``; the block-major channel
    order (DepthToSpace's ``DCR`` mode, SpaceToDepth) is that op's channels regrouped by a transpose."""
    r = int(c.attr("blocksize"))
    x = c.tensor(0)
    if c.rank(0) != 4:
        raise refuse(c, f"{c.op_type} of a {c.rank(0)}-D input")
    if c.op_type == "SpaceToDepth":
        x = c.call("pixel_unshuffle", x, r)
    n, channels, h, w = (c.call("size", x, i) for i in range(4))
    if c.op_type == "DepthToSpace":
        if c.attr("mode", "DCR") == "DCR":  # channel (i * r + j) * C + k -> C-major: k * r * r + i * r + j
            x = c.call("reshape", c.call("transpose", c.call("reshape", x, n, r * r, -1, h, w), 1, 2),
                       n, channels, h, w)
        return c.call("pixel_shuffle", x, r)
    # channel k * r * r + (i * r + j) -> block-major: (i * r + j) * C + k
    return c.call("reshape", c.call("transpose", c.call("reshape", x, n, -1, r * r, h, w), 1, 2), n, channels, h, w)
