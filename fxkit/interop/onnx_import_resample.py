"""ONNX import rule of ``Resize``: back to interpolate, for the attribute combinations
that are PyTorch's modes (the ones `onnx_rules_resample` and ``torch.onnx.export``
write); any other combination is refused, naming it."""
import numpy as np

from fxkit.interop.onnx_import_rules import import_rule, refuse

_LINEAR = {3: "linear", 4: "bilinear", 5: "trilinear"}


def _mode(c, rank):
    """``(fxkit mode, align_corners)`` of the node's attributes."""
    mode, transform = c.attr("mode", "nearest"), c.attr("coordinate_transformation_mode", "half_pixel")
    if mode == "nearest":
        nearest = c.attr("nearest_mode", "round_prefer_floor")
        if transform == "asymmetric" and nearest == "floor":
            return "nearest", None
        if transform in ("half_pixel", "pytorch_half_pixel") and nearest == "round_prefer_ceil":
            return "nearest-exact", None
    elif transform in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        align = transform == "align_corners"
        if mode == "linear" and rank in _LINEAR:
            return _LINEAR[rank], align
        if mode == "cubic" and rank == 4 and c.attr("cubic_coeff_a", -0.75) == -0.75 \
                and not c.attr("exclude_outside", 0):
            return "bicubic", align
    raise refuse(c, f"Resize with mode={mode!r}, coordinate_transformation_mode={transform!r} "
                    f"(nearest_mode={c.attr('nearest_mode', 'round_prefer_floor')!r}) on a rank-{rank} input")


@import_rule("Resize")
def _resize(c):
    if c.attr("antialias", 0) or c.attr("axes") is not None:
        raise refuse(c, "Resize with antialias or axes")
    rank = c.rank(0)
    mode, align = _mode(c, rank)
    if c.value(3) is not None:
        sizes = c.ints(3)
        return c.call("interpolate", c.tensor(0), size=tuple(sizes[2:]), mode=mode, align_corners=align)
    scales = np.asarray(c.const(2), dtype=np.float64).reshape(-1)
    if scales.size != rank or scales[0] != 1 or scales[1] != 1:
        raise refuse(c, f"Resize with scales {scales.tolist()} (batch and channel must keep their size)")
    return c.call("interpolate", c.tensor(0), scale_factor=tuple(float(s) for s in scales[2:]), mode=mode,
                  align_corners=align)
