"""Cross-layer equalization (`equalize`): the float function is unchanged (against a float64
evaluation of the original weights), each equalized pair's channel ranges meet at
``sqrt(r1 * r2)`` (computed here from the original weights), ReLU6 pairs are skipped or made
ReLU as asked, and equalizing after calibration is refused."""
import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import GraphError
from fxkit.nn import functional as F
from fxkit.transforms.quantize import calibrate, equalize, per_channel_qconfig, prepare


class Chain(nn.Module):
    """conv -> relu -> depthwise conv -> (none) -> 1x1 conv -> relu6 -> 1x1 conv."""

    def __init__(self):
        super().__init__()
        self.expand = nn.Conv2d(3, 8, 3, padding=1)
        self.depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.project = nn.Conv2d(8, 6, 1)
        self.head = nn.Conv2d(6, 4, 1)

    def forward(self, x):
        x = self.project(self.depthwise(F.relu(self.expand(x))))
        return self.head(F.relu6(x))


def _chain(rng):
    fxkit.manual_seed(0)
    model = Chain().eval()
    with fxkit.no_grad():
        # channel ranges three decades apart, as batch-norm folding leaves them
        for conv in (model.expand, model.depthwise):
            conv.weight.numpy()[...] *= (10.0 ** rng.uniform(-2, 1, conv.weight.shape[0]))[:, None, None, None]
    return model


def _float64_forward(weights, x, top=6.0):
    """The Chain in float64 numpy from ``{name: (weight, bias)}``; ``top``: ReLU6's bound."""
    def conv(x, name, groups=1):
        w, b = (a.astype(np.float64) for a in weights[name])
        pad = w.shape[2] // 2
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
        n, c, h, wd = x.shape
        per_in, per_out = c // groups, w.shape[0] // groups
        out = [np.einsum("nchwij,ocij->nohw", win[:, g * per_in:(g + 1) * per_in], w[g * per_out:(g + 1) * per_out])
               for g in range(groups)]
        return np.concatenate(out, 1) + b[None, :, None, None]

    y = conv(conv(np.maximum(conv(x, "expand"), 0), "depthwise", groups=8), "project")
    return conv(np.clip(y, 0, top), "head")


def _weights(gm, names):
    params = dict(gm.named_parameters())
    return {n: (params[f"{n}.weight"].numpy().copy(), params[f"{n}.bias"].numpy().copy()) for n in names}


NAMES = ("expand", "depthwise", "project", "head")


@pytest.mark.parametrize("relu6", ["skip", "relu"])
def test_equalization_keeps_the_float_function_and_meets_the_ranges(rng, relu6):
    model = _chain(rng)
    original = _weights(model, NAMES)
    prepared = equalize(prepare(model, per_channel_qconfig), relu6=relu6)
    pairs = [(p.first, p.second, p.activation) for p in prepared.equalized_pairs]
    expected_pairs = [("expand", "depthwise", "relu"), ("depthwise", "project", "none")]
    assert pairs == expected_pairs + ([("project", "head", "relu6")] if relu6 == "relu" else [])
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32) * 0.1  # project's outputs stay below 6
    reference = _float64_forward(original, x)
    assert np.array_equal(reference, _float64_forward(original, x, top=np.inf))  # the ReLU6 never clips here
    out = prepared(fxkit.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())

    changed = _weights(prepared, NAMES)
    assert not np.allclose(changed["expand"][0], original["expand"][0])
    # after equalization, both sides of each channel have range sqrt(r1 * r2) of the chain's fixed point:
    # the first layer's output range equals the second's input range, channel by channel
    r_expand = np.abs(changed["expand"][0]).reshape(8, -1).max(1)
    r_depthwise_in = np.abs(changed["depthwise"][0]).reshape(8, -1).max(1)
    np.testing.assert_allclose(r_expand, r_depthwise_in, rtol=1e-3)
    r_depthwise_out = r_depthwise_in
    r_project_in = np.abs(changed["project"][0]).max(axis=(0, 2, 3))
    np.testing.assert_allclose(r_depthwise_out, r_project_in, rtol=1e-3)
    relu6_nodes = [n for n in prepared.graph.nodes if n.is_op(fxkit.ops.relu6)]
    assert len(relu6_nodes) == (0 if relu6 == "relu" else 1)


def test_equalize_refuses_a_calibrated_model_and_unknown_relu6_handling(rng):
    model = _chain(rng)
    prepared = prepare(model, per_channel_qconfig)
    with pytest.raises(GraphError, match="relu6 must be 'relu' or 'skip'"):
        equalize(prepared, relu6="clip")
    calibrate(prepared, [fxkit.from_numpy(rng.standard_normal((2, 3, 7, 7)).astype(np.float32))], progress=False)
    with pytest.raises(GraphError, match="between prepare and calibrate"):
        equalize(prepared)
