"""remove_dropout: eval-mode dropout (ops with training=False, layers in eval mode, p=0) goes,
training-mode dropout stays unless forced; outputs stay equal on the zoo."""
import numpy as np
import pytest

import fxkit
import fxkit.models
import fxkit.nn.functional as F
from fxkit import nn, ops
from fxkit.transforms import RemoveDropout, remove_dropout
from tests.tracer.paths import assert_same
from tests.transforms.model_paths import check_model_paths, zoo_model, zoo_params


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


def dropouts(gm):
    return [n for n in gm.graph.nodes
            if n.is_op("dropout") or n.is_op("dropout2d") or n.is_module(gm, (nn.Dropout, nn.Dropout2d))]


def lenet(training):
    fxkit.manual_seed(0)
    model, _ = fxkit.models.get("lenet")
    return model.train(training)


def test_eval_mode_lenet_loses_both_dropouts(rng):
    model = lenet(training=False)
    gm = fxkit.symbolic_trace(model)
    assert len(dropouts(gm)) == 2          # F.dropout(training=False) and the Dropout2d layer
    x = randn(rng, 2, 1, 28, 28)
    expected = model(x)
    gm = remove_dropout(gm)
    gm.graph.lint()
    assert dropouts(gm) == []
    assert "conv2_drop" not in dict(gm.named_children())
    assert_same(gm(x), expected)


def test_training_mode_dropout_stays():
    gm = remove_dropout(fxkit.symbolic_trace(lenet(training=True)))
    assert len(dropouts(gm)) == 2


def test_forced_removal_gives_the_eval_model_for_export(rng):
    gm = RemoveDropout(force=True)(fxkit.symbolic_trace(lenet(training=True)))
    assert dropouts(gm) == []
    x = randn(rng, 2, 1, 28, 28)
    assert_same(gm(x), lenet(training=False)(x))


def test_forced_removal_stops_attention_dropout(rng):
    def f(q, k, v):
        sdpa = F.scaled_dot_product_attention
        return sdpa(q, k, v, dropout_p=0.3) + sdpa(q, k, v, None, 0.5, True)

    gm = fxkit.symbolic_trace(f)
    q, k, v = randn(rng, 2, 5, 4), randn(rng, 2, 5, 4), randn(rng, 2, 5, 4)
    assert remove_dropout(gm).graph.find_nodes(op="call", target=ops.scaled_dot_product_attention)[0].kwargs[
        "dropout_p"] == 0.3  # not forced: the training-mode dropout stays
    gm = remove_dropout(gm, force=True)
    calls = gm.graph.find_nodes(op="call", target=ops.scaled_dot_product_attention)
    assert [c.kwargs.get("dropout_p", c.args[4] if len(c.args) > 4 else None) for c in calls] == [0.0, 0.0]
    expected = ops.scaled_dot_product_attention(q, k, v) + ops.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_same(gm(q, k, v), expected)


def test_the_training_flag_is_read_wherever_it_is_written(rng):
    def f(x):
        a = F.dropout(x, 0.5, False)                 # positional
        b = F.dropout2d(x, p=0.3, training=False)    # keywords
        c = F.dropout(x, 0.0, True)                  # p = 0: the identity even in training
        d = F.dropout(x, 0.5)                        # the default is training=True
        return a + b + c, d

    gm = remove_dropout(fxkit.symbolic_trace(f))
    kept = dropouts(gm)
    assert len(kept) == 1 and kept[0].args == (kept[0].args[0], 0.5)
    x = randn(rng, 2, 3, 4, 4)
    total, _ = gm(x)
    np.testing.assert_allclose(total.numpy(), 3 * x.numpy(), rtol=1e-6)


def test_layers_in_eval_mode_or_with_p_zero_go():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.off = nn.Dropout(0.0)
            self.on = nn.Dropout(0.5)

        def forward(self, x):
            return self.on(self.off(x)).relu()

    gm = remove_dropout(fxkit.symbolic_trace(M()))
    assert [n.target for n in dropouts(gm)] == ["on"] and "off" not in dict(gm.named_children())
    gm = remove_dropout(fxkit.symbolic_trace(M().eval()))
    assert dropouts(gm) == [] and [n.target for n in gm.graph.nodes if n.op == "call"] == [ops.relu]


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_outputs_stay_equal(name):
    model, inputs = zoo_model(name)
    _, transformed = check_model_paths(model, inputs, passes=[remove_dropout])
    assert dropouts(transformed["remove_dropout"]) == []
