"""Error messages of the conv, pooling and interpolate ops: each names the op, the
offending shapes or values and what was expected; shape rules raise the same.
Also: their shape rules over symbolic sizes."""
import numpy as np
import pytest

import fxkit
from fxkit import ops
from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from tests.runtime.opcheck import randf, randi


def t(array):
    return fxkit.from_numpy(array)


def meta(*shape, dtype=fxkit.float32):
    return TensorMeta(shape, dtype)


# -- conv2d ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 4), (1, 2, 3, 4, 5)])
def test_conv2d_wrong_rank_names_the_accepted_ranks(rng, shape):
    message = (r"conv2d: expected a 3-D \(unbatched\) or 4-D \(batched\) input, got a "
               rf"{len(shape)}-D input of shape {list(shape)}".replace("[", r"\[").replace("]", r"\]"))
    with pytest.raises(ShapeError, match=message):
        ops.conv2d(t(randf(rng, *shape)), t(randf(rng, 2, 3, 1, 1)))
    with pytest.raises(ShapeError, match=message):
        ops.conv2d.shape_rule(meta(*shape), meta(2, 3, 1, 1))


def test_conv2d_channel_mismatch_names_weight_and_input(rng):
    message = (r"conv2d: weight of shape \[20, 10, 5, 5\] expects 10 input channels \(groups=1\), "
               r"got an input of shape \[8, 3, 28, 28\]")
    with pytest.raises(ShapeError, match=message):
        ops.conv2d(t(randf(rng, 8, 3, 28, 28)), t(randf(rng, 20, 10, 5, 5)))
    with pytest.raises(ShapeError, match=message):
        ops.conv2d.shape_rule(meta(8, 3, 28, 28), meta(20, 10, 5, 5))


def test_conv2d_channel_mismatch_counts_groups(rng):
    with pytest.raises(ShapeError, match=r"weight of shape \[4, 2, 3, 3\] expects 4 input channels \(groups=2\), "
                                         r"got an input of shape \[1, 6, 5, 5\]"):
        ops.conv2d(t(randf(rng, 1, 6, 5, 5)), t(randf(rng, 4, 2, 3, 3)), groups=2)


def test_conv2d_out_channels_not_divisible_by_groups(rng):
    with pytest.raises(ShapeError, match=r"conv2d: weight of shape \[3, 1, 3, 3\] has 3 output channels, "
                                         r"which groups=2 does not divide"):
        ops.conv2d(t(randf(rng, 1, 2, 5, 5)), t(randf(rng, 3, 1, 3, 3)), groups=2)


def test_conv2d_weight_rank(rng):
    with pytest.raises(ShapeError, match=r"conv2d: expected a 4-D weight \(out_channels, in_channels/groups, "
                                         r"kH, kW\), got one of shape \[4, 3, 3\]"):
        ops.conv2d(t(randf(rng, 1, 3, 5, 5)), t(randf(rng, 4, 3, 3)))


def test_conv2d_bias_of_wrong_size(rng):
    with pytest.raises(ShapeError, match=r"conv2d: weight of shape \[4, 3, 3, 3\] expects a bias of shape \[4\], "
                                         r"got \[5\]"):
        ops.conv2d(t(randf(rng, 1, 3, 5, 5)), t(randf(rng, 4, 3, 3, 3)), t(randf(rng, 5)))


def test_conv2d_kernel_larger_than_padded_input(rng):
    with pytest.raises(ShapeError, match=r"conv2d: the kernel \[5, 5\] \(dilation \[1, 1\]\) is larger than the "
                                         r"padded input of shape \[1, 1, 4, 4\] with padding 0; use a smaller "
                                         r"kernel or more padding"):
        ops.conv2d(t(randf(rng, 1, 1, 4, 4)), t(randf(rng, 1, 1, 5, 5)))


def test_conv2d_same_padding_refuses_strides(rng):
    with pytest.raises(ShapeError, match=r"conv2d: padding='same' is not supported for strided convolutions "
                                         r"\(stride=\(2, 2\)\)"):
        ops.conv2d(t(randf(rng, 1, 1, 4, 4)), t(randf(rng, 1, 1, 3, 3)), stride=2, padding="same")


def test_conv2d_bad_padding_arguments(rng):
    x, w = t(randf(rng, 1, 1, 4, 4)), t(randf(rng, 1, 1, 3, 3))
    with pytest.raises(ShapeError, match=r"conv2d: invalid padding string 'full', expected 'valid' or 'same'"):
        ops.conv2d(x, w, padding="full")
    with pytest.raises(ShapeError, match=r"conv2d: negative padding is not supported, got padding=-1"):
        ops.conv2d(x, w, padding=-1)
    with pytest.raises(ShapeError, match=r"conv2d: expected padding to be a single integer value or a list of 2 "
                                         r"values, got \(1, 1, 1\)"):
        ops.conv2d(x, w, padding=(1, 1, 1))
    with pytest.raises(ShapeError, match=r"conv2d: stride must be positive, got \(0, 1\)"):
        ops.conv2d(x, w, stride=(0, 1))


def test_conv2d_dtypes(rng):
    with pytest.raises(DTypeError, match=r"conv2d: input \(float32\) and weight \(float64\) must have the same "
                                         r"dtype; cast one with .to\(float32\)"):
        ops.conv2d(t(randf(rng, 1, 1, 4, 4)), t(randf(rng, 1, 1, 3, 3, dtype=np.float64)))
    with pytest.raises(DTypeError, match=r"conv2d: expected a floating-point input, got int64"):
        ops.conv2d(t(randi(rng, 1, 1, 4, 4)), t(randi(rng, 1, 1, 3, 3)))


# -- conv1d, conv_transpose2d --------------------------------------------------------------
def test_conv1d_wrong_rank_and_channels(rng):
    with pytest.raises(ShapeError, match=r"conv1d: expected a 2-D \(unbatched\) or 3-D \(batched\) input, got a "
                                         r"4-D input of shape \[1, 2, 3, 4\]"):
        ops.conv1d(t(randf(rng, 1, 2, 3, 4)), t(randf(rng, 2, 2, 3)))
    with pytest.raises(ShapeError, match=r"conv1d: weight of shape \[2, 3, 3\] expects 3 input channels "
                                         r"\(groups=1\), got an input of shape \[1, 2, 8\]"):
        ops.conv1d.shape_rule(meta(1, 2, 8), meta(2, 3, 3))


def test_conv_transpose2d_channel_mismatch(rng):
    with pytest.raises(ShapeError, match=r"conv_transpose2d: weight of shape \[4, 2, 3, 3\] expects 4 input "
                                         r"channels \(groups=1\), got an input of shape \[1, 3, 5, 5\]"):
        ops.conv_transpose2d(t(randf(rng, 1, 3, 5, 5)), t(randf(rng, 4, 2, 3, 3)))


def test_conv_transpose2d_output_padding_bound(rng):
    with pytest.raises(ShapeError, match=r"conv_transpose2d: output padding must be smaller than either stride "
                                         r"or dilation, but got output_padding=\[2, 2\], stride=\[2, 2\], "
                                         r"dilation=\[1, 1\]"):
        ops.conv_transpose2d(t(randf(rng, 1, 1, 4, 4)), t(randf(rng, 1, 1, 3, 3)), stride=2, output_padding=2)


def test_conv_transpose2d_output_too_small(rng):
    with pytest.raises(ShapeError, match=r"conv_transpose2d: input of shape \[1, 1, 1, 1\] gives an output size "
                                         r"of -1 with padding=\[1, 1\]; use less padding"):
        ops.conv_transpose2d.shape_rule(meta(1, 1, 1, 1), meta(1, 1, 1, 1), padding=1)


# -- pooling ----------------------------------------------------------------------------------
def test_max_pool2d_wrong_rank(rng):
    with pytest.raises(ShapeError, match=r"max_pool2d: expected a 3-D \(unbatched\) or 4-D \(batched\) input, "
                                         r"got a 2-D input of shape \[4, 4\]"):
        ops.max_pool2d(t(randf(rng, 4, 4)), 2)


def test_pool_padding_at_most_half_the_kernel(rng):
    with pytest.raises(ShapeError, match=r"max_pool2d: pad should be at most half of kernel size, but got "
                                         r"padding=\[2, 2\] for kernel_size=\[3, 3\]"):
        ops.max_pool2d(t(randf(rng, 1, 1, 9, 9)), 3, padding=2)
    with pytest.raises(ShapeError, match=r"avg_pool2d: pad should be at most half of kernel size"):
        ops.avg_pool2d.shape_rule(meta(1, 1, 9, 9), 3, padding=2)


def test_pool_output_too_small(rng):
    with pytest.raises(ShapeError, match=r"max_pool2d: input of shape \[1, 4, 4\] gives an output of size "
                                         r"\[0, 0\], which is too small; use a smaller kernel_size or more padding"):
        ops.max_pool2d(t(randf(rng, 1, 4, 4)), 5)


def test_pool_zero_stride(rng):
    with pytest.raises(ShapeError, match=r"avg_pool2d: stride must be positive, got \[0, 0\]"):
        ops.avg_pool2d(t(randf(rng, 1, 1, 4, 4)), 2, stride=0)


def test_adaptive_avg_pool2d_needs_floats_and_nonempty_maps(rng):
    with pytest.raises(DTypeError, match=r"adaptive_avg_pool2d: expected a floating-point input, got int64"):
        ops.adaptive_avg_pool2d(t(randi(rng, 1, 2, 4, 4)), 2)
    with pytest.raises(ShapeError, match=r"adaptive_avg_pool2d: expected an input with non-zero sizes outside the "
                                         r"batch dimension, got shape \[1, 2, 0, 4\]"):
        ops.adaptive_avg_pool2d.shape_rule(meta(1, 2, 0, 4), 2)


# -- interpolate ---------------------------------------------------------------------------
def test_interpolate_needs_exactly_one_of_size_and_scale(rng):
    x = t(randf(rng, 1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"interpolate: only one of size or scale_factor should be defined"):
        ops.interpolate(x, size=8, scale_factor=2)
    with pytest.raises(ValueError, match=r"interpolate: either size or scale_factor should be defined"):
        ops.interpolate(x)


def test_interpolate_align_corners_with_nearest(rng):
    with pytest.raises(ValueError, match=r"interpolate: align_corners option can only be set with the "
                                         r"interpolating modes"):
        ops.interpolate(t(randf(rng, 1, 1, 4, 4)), scale_factor=2, align_corners=True)


def test_interpolate_unsupported_mode_and_rank(rng):
    with pytest.raises(ValueError, match=r"interpolate: mode 'area' is not supported; use one of "
                                         r"\('nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear'\)"):
        ops.interpolate(t(randf(rng, 1, 1, 4, 4)), scale_factor=2, mode="area")
    with pytest.raises(ShapeError, match=r"interpolate: expected a 3-D \(N, C, L\), 4-D \(N, C, H, W\) or 5-D "
                                         r"\(N, C, D, H, W\) input, got a 2-D input of shape \[4, 4\]"):
        ops.interpolate.shape_rule(meta(4, 4), scale_factor=2)
    with pytest.raises(ShapeError, match=r"interpolate: got 3D input, but bicubic mode needs 4D input"):
        ops.interpolate.shape_rule(meta(1, 4, 4), scale_factor=2, mode="bicubic")


def test_interpolate_output_must_be_nonempty(rng):
    with pytest.raises(ShapeError, match=r"interpolate: input and output sizes should be greater than 0, but got "
                                         r"input \[1, 1, 4, 4\] and output size \[1, 0\]"):
        ops.interpolate(t(randf(rng, 1, 1, 4, 4)), scale_factor=(0.3, 0.2))


# -- shape rules over symbolic dims ---------------------------------------------------------
def _rule_shape(rule, *args, **kwargs):
    out = rule(*args, **kwargs)
    return tuple(str(d) for d in (out if isinstance(out, TensorMeta) else out[0]).shape)


def test_rules_keep_symbolic_sizes_simple():
    """A size-preserving window gives back the symbol itself, so a residual add's shapes still match."""
    from tests.runtime.test_shape_errors import Sym

    x = meta(Sym("N"), 3, Sym("H"), Sym("W"))
    assert _rule_shape(ops.conv2d.shape_rule, x, meta(8, 3, 3, 3), padding=1) == ("N", "8", "H", "W")
    assert _rule_shape(ops.conv2d.shape_rule, x, meta(8, 3, 4, 4), padding="same") == ("N", "8", "H", "W")
    assert _rule_shape(ops.conv2d.shape_rule, x, meta(8, 3, 3, 3), stride=2, padding=1) == (
        "N", "8", "(((H - 1) // 2) + 1)", "(((W - 1) // 2) + 1)")
    assert _rule_shape(ops.conv_transpose2d.shape_rule, x, meta(3, 4, 3, 3), stride=2, padding=1,
                       output_padding=1) == ("N", "4", "(H * 2)", "(W * 2)")
    assert _rule_shape(ops.max_pool2d.shape_rule, x, 3, 1, 1, return_indices=True) == ("N", "3", "H", "W")
    assert _rule_shape(ops.adaptive_avg_pool2d.shape_rule, x, (None, 1)) == ("N", "3", "H", "1")
    assert _rule_shape(ops.interpolate.shape_rule, x, scale_factor=(1, 2)) == ("N", "3", "H", "(W * 2)")
