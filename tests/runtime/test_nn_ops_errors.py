"""Error messages of the nn ops (norms, losses, dropout, embedding, one_hot): each
names the op, the offending values and what was expected; shape rules raise the same."""
import numpy as np
import pytest

import fxkit
import fxkit.nn.functional as F
from fxkit import ops
from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from tests.runtime.opcheck import randf, randi, randpos


def t(array):
    return fxkit.from_numpy(array)


def meta(*shape, dtype=fxkit.float32):
    return TensorMeta(shape, dtype)


# -- norms ----------------------------------------------------------------
def test_batch_norm_wrong_rank_names_the_expected_ranks(rng):
    with pytest.raises(ShapeError, match=r"batch_norm: expected an input of rank 2 \(N, C\), 3 \(N, C, L\), "
                                         r"4 \(N, C, H, W\).*got rank 1 with shape \[5\]"):
        ops.batch_norm(t(randf(rng, 5)), t(randf(rng, 5)), t(randpos(rng, 5)))
    with pytest.raises(ShapeError, match=r"got rank 1 with shape \[5\]"):
        ops.batch_norm.shape_rule(meta(5), meta(5), meta(5))


def test_batch_norm_running_stats_of_wrong_size(rng):
    with pytest.raises(ShapeError, match=r"batch_norm: running_var should have shape \[3\].*got \[4\]"):
        ops.batch_norm(t(randf(rng, 2, 3, 4)), t(randf(rng, 3)), t(randpos(rng, 4)))


def test_batch_norm_eval_needs_running_stats(rng):
    with pytest.raises(ShapeError, match=r"running_mean and running_var must be given in evaluation mode"):
        ops.batch_norm(t(randf(rng, 2, 3)), None, None)


def test_batch_norm_training_needs_more_than_one_value_per_channel(rng):
    with pytest.raises(ShapeError, match=r"more than 1 value per channel when training, got input of shape \[1, 3\]"):
        ops.batch_norm(t(randf(rng, 1, 3)), None, None, training=True)


def test_batch_norm_refuses_integer_input(rng):
    with pytest.raises(DTypeError, match=r"batch_norm: expected a floating-point input, got int64"):
        ops.batch_norm(t(randi(rng, 2, 3)), t(randf(rng, 3)), t(randpos(rng, 3)))


def test_layer_norm_shape_mismatch_names_both_shapes(rng):
    with pytest.raises(ShapeError, match=r"layer_norm: given normalized_shape=\[3, 5\], expected an input of shape "
                                         r"\[\*, 3, 5\], but got input of shape \[2, 4, 5\]"):
        ops.layer_norm(t(randf(rng, 2, 4, 5)), (3, 5))
    with pytest.raises(ShapeError, match=r"normalized_shape=\[3\].*input of shape \[2, 4\]"):
        ops.layer_norm.shape_rule(meta(2, 4), 3)


def test_layer_norm_weight_shape_mismatch(rng):
    with pytest.raises(ShapeError, match=r"expected weight of the same shape as normalized_shape=\[4\], "
                                         r"got weight of shape \[5\]"):
        ops.layer_norm(t(randf(rng, 2, 4)), 4, t(randf(rng, 5)))


def test_group_norm_channels_not_divisible_by_groups(rng):
    with pytest.raises(ShapeError, match=r"group_norm: expected the number of channels to be divisible by "
                                         r"num_groups, but got input of shape \[2, 6, 4\] \(6 channels\) and "
                                         r"num_groups=4"):
        ops.group_norm(t(randf(rng, 2, 6, 4)), 4)
    with pytest.raises(ShapeError, match=r"\(6 channels\) and num_groups=4"):
        ops.group_norm.shape_rule(meta(2, 6, 4), 4)


def test_group_norm_weight_of_wrong_size(rng):
    with pytest.raises(ShapeError, match=r"group_norm: weight should have shape \[6\].*got \[3\]"):
        ops.group_norm(t(randf(rng, 2, 6, 4)), 3, t(randf(rng, 3)))


def test_norm_rules_accept_symbolic_dimensions():
    assert ops.batch_norm.shape_rule(meta("N", 3, 8, 8), meta(3), meta(3), training=True).shape == ("N", 3, 8, 8)
    assert ops.layer_norm.shape_rule(meta("N", "T", 16), (16,)).shape == ("N", "T", 16)
    assert ops.group_norm.shape_rule(meta("N", 8, "H", "W"), 4).shape == ("N", 8, "H", "W")
    assert ops.nll_loss.shape_rule(meta("N", 5), meta("N", dtype=fxkit.int64), reduction="none").shape == ("N",)


# -- losses ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["nll_loss", "cross_entropy"])
@pytest.mark.parametrize("bad", [3, 7, -2])
def test_class_target_out_of_range_names_the_value_and_C(name, bad, rng):
    target = np.array([0, 1, bad, 2])
    with pytest.raises(IndexOutOfRangeError, match=rf"{name}: target {bad} is out of bounds for C=3 classes "
                                                   rf"\(expected 0 <= target < 3, or ignore_index=-100\)"):
        getattr(ops, name)(t(randf(rng, 4, 3)), t(target))


def test_class_target_out_of_range_among_ignored_targets(rng):
    with pytest.raises(IndexOutOfRangeError, match=r"target 9 is out of bounds for C=3"):
        ops.cross_entropy(t(randf(rng, 4, 3)), t(np.array([-100, 9, 1, -100])))


def test_class_target_shape_mismatch(rng):
    with pytest.raises(ShapeError, match=r"nll_loss: expected target of shape \[2, 5\] for input of shape "
                                         r"\[2, 3, 5\].*got target of shape \[2, 4\]"):
        ops.nll_loss(t(randf(rng, 2, 3, 5)), t(randi(rng, 2, 4, low=0, high=3)))


def test_class_targets_must_be_integers(rng):
    with pytest.raises(DTypeError, match=r"nll_loss: expected an integer \(int64\) target, got float32"):
        ops.nll_loss(t(randf(rng, 4, 3)), t(randf(rng, 4)))


def test_class_weight_of_wrong_size(rng):
    with pytest.raises(ShapeError, match=r"cross_entropy: weight should hold one value for each of the 3 classes, "
                                         r"got weight of shape \[2\]"):
        ops.cross_entropy(t(randf(rng, 4, 3)), t(randi(rng, 4, low=0, high=3)), t(randpos(rng, 2)))


def test_invalid_reduction_and_label_smoothing(rng):
    x, target = t(randf(rng, 4, 3)), t(randi(rng, 4, low=0, high=3))
    with pytest.raises(ShapeError, match=r"cross_entropy: reduction='avg' is not valid; use 'none', 'mean' or 'sum'"):
        ops.cross_entropy(x, target, reduction="avg")
    with pytest.raises(ShapeError, match=r"label_smoothing must be between 0.0 and 1.0, got 1.5"):
        ops.cross_entropy(x, target, label_smoothing=1.5)


def test_mse_loss_weight_of_wrong_size_and_integer_inputs(rng):
    with pytest.raises(ShapeError, match=r"mse_loss: weight and input must have the same size, got weight of "
                                         r"shape \[3\] and input of shape \[2, 3\]"):
        ops.mse_loss(t(randf(rng, 2, 3)), t(randf(rng, 2, 3)), weight=t(randpos(rng, 3)))
    with pytest.raises(DTypeError, match=r"mse_loss: expected floating-point input and target, got int64 and int64"):
        ops.mse_loss(t(randi(rng, 3)), t(randi(rng, 3)))


def test_mse_loss_broadcasting_warns_like_torch(rng):
    x, target = randf(rng, 3), randf(rng, 2, 3)
    with pytest.warns(UserWarning, match=r"target size \(\[2, 3\]\) that is different to the input size \(\[3\]\)"):
        out = ops.mse_loss(t(x), t(target))
    np.testing.assert_allclose(out.item(), ((x.astype(np.float64) - target) ** 2).mean(), rtol=1e-5)


# -- dropout, embedding, one_hot ------------------------------------------
@pytest.mark.parametrize("name", ["dropout", "dropout2d"])
@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_dropout_probability_out_of_range(name, p, rng):
    with pytest.raises(ValueError, match=rf"{name}: dropout probability has to be between 0 and 1, but got {p}"):
        getattr(ops, name)(t(randf(rng, 2, 3)), p)
    with pytest.raises(ValueError, match=rf"but got {p}"):
        getattr(ops, name).shape_rule(meta(2, 3), p)


def test_dropout2d_needs_channels_and_dropout_needs_floats(rng):
    with pytest.raises(ShapeError, match=r"dropout2d: channel-wise dropout needs an input of rank >= 2 "
                                         r"\(N, C, \*\), got shape \[5\]"):
        ops.dropout2d(t(randf(rng, 5)))
    with pytest.raises(DTypeError, match=r"dropout: expected a floating-point input, got int64"):
        ops.dropout(t(randi(rng, 5)))


@pytest.mark.parametrize("bad", [10, 12, -1])
def test_embedding_index_out_of_range_names_index_and_num_embeddings(bad, rng):
    with pytest.raises(IndexOutOfRangeError, match=rf"embedding: index {bad} is out of range for "
                                                   rf"num_embeddings=10 \(weight of shape \[10, 3\]\); "
                                                   rf"valid indices are 0..9"):
        ops.embedding(t(np.array([[1, bad], [0, 2]])), t(randf(rng, 10, 3)))


def test_embedding_argument_checks(rng):
    with pytest.raises(DTypeError, match=r"embedding: expected an integer \(int64\) input, got float32"):
        ops.embedding(t(randf(rng, 3)), t(randf(rng, 10, 3)))
    with pytest.raises(ShapeError, match=r"weight must be 2-D \(num_embeddings, embedding_dim\), got shape \[10\]"):
        ops.embedding(t(randi(rng, 3, low=0, high=9)), t(randf(rng, 10)))
    with pytest.raises(IndexOutOfRangeError, match=r"padding_idx=5 must be within num_embeddings=5"):
        ops.embedding(t(randi(rng, 3, low=0, high=4)), t(randf(rng, 5, 2)), padding_idx=5)


def test_one_hot_errors(rng):
    with pytest.raises(IndexOutOfRangeError, match=r"one_hot: class values must be smaller than num_classes=3, "
                                                   r"got 3"):
        ops.one_hot(t(np.array([0, 3, 1])), 3)
    with pytest.raises(IndexOutOfRangeError, match=r"class values must be non-negative, got -1"):
        ops.one_hot(t(np.array([0, -1])))
    with pytest.raises(DTypeError, match=r"one_hot: expected an integer \(int64\) tensor, got float32"):
        ops.one_hot(t(randf(rng, 3)), 3)
    with pytest.raises(ShapeError, match=r"cannot infer num_classes from an empty tensor"):
        ops.one_hot(t(np.zeros(0, dtype=np.int64)))
    with pytest.raises(ShapeError, match=r"with num_classes=-1 the output size .* depends on the data"):
        ops.one_hot.shape_rule(meta(4, dtype=fxkit.int64))


# -- the ops added for imported models ----------------------------------------------------------
def test_attention_errors_say_what_and_how():
    q, k, v = fxkit.randn(2, 4, 3, 8), fxkit.randn(2, 2, 5, 8), fxkit.randn(2, 2, 5, 6)
    sdpa = F.scaled_dot_product_attention
    with pytest.raises(ShapeError, match=r"should not be set when is_causal=True.*combine a causal mask"):
        sdpa(q, k, v, attn_mask=fxkit.ones(3, 5).bool(), is_causal=True, enable_gqa=True)
    with pytest.raises(ShapeError, match=r"query heads \(4\) to be a multiple of the key and value heads \(3, 3\)"):
        sdpa(q, fxkit.randn(2, 3, 5, 8), fxkit.randn(2, 3, 5, 6), enable_gqa=True)
    with pytest.raises(ShapeError, match=r"key and value must have the same length, got key \[2, 2, 5, 8\] and value"):
        sdpa(q, k, fxkit.randn(2, 2, 4, 6), enable_gqa=True)
    with pytest.raises(DTypeError, match=r"attn_mask must be bool or of the query's dtype \(float32\), got int64"):
        sdpa(q, k, v, attn_mask=fxkit.ones(3, 5).long(), enable_gqa=True)
    with pytest.raises(ShapeError, match=r"leading dims of query \[2, 4, 3, 8\], key \[2, 2, 5, 8\].*"
                                         r"pass enable_gqa=True"):
        sdpa(q, k, v)  # 4 query heads against 2 key heads without enable_gqa


def test_sort_and_topk_errors():
    x = fxkit.randn(3, 4)
    with pytest.raises(IndexOutOfRangeError, match=r"topk: k=5 is out of range for dimension -1 of size 4.*\[0, 4\]"):
        x.topk(5)
    with pytest.raises(DTypeError, match=r"topk: bool inputs are not supported.*\.int\(\)"):
        (x > 0).topk(1)
    with pytest.raises(DTypeError, match=r"sort: descending must be a bool, got str"):
        x.sort(descending="yes")


def test_instance_and_rms_norm_errors():
    with pytest.raises(ShapeError, match=r"instance_norm: expected an input of rank >= 3 \(N, C, \*\).*unsqueeze\(0\)"):
        F.instance_norm(fxkit.randn(4, 3))
    with pytest.raises(ShapeError, match=r"expected more than 1 spatial element when training, got input of shape "
                                         r"\[2, 3, 1\]"):
        F.instance_norm(fxkit.randn(2, 3, 1))
    with pytest.raises(ShapeError, match=r"must be given when use_input_stats=False"):
        F.instance_norm(fxkit.randn(2, 3, 4), use_input_stats=False)
    with pytest.raises(ShapeError, match=r"rms_norm: given normalized_shape=\[5\], expected an input of shape "
                                         r"\[\*, 5\], but got input of shape \[2, 4\]"):
        F.rms_norm(fxkit.randn(2, 4), (5,))
    with pytest.raises(DTypeError, match=r"relu6: bool inputs are not supported.*cast with"):
        F.relu6(fxkit.ones(3).bool())
