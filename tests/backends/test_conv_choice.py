"""The numba backend's choice per conv between its rule and numpy's conv2d: each choice against PyTorch,
explain() naming it with the measured times, and no numpy result left to meet a reordered value."""
from unittest import mock

import numpy as np
import pytest

import fxkit
from fxkit import nn, ops
from fxkit.backends import conv_choice
from fxkit.backends.cost_model import Decision
from fxkit.errors import LoweringError
from tests.backends.examples import randn

pytest.importorskip("numba")


class _Block(nn.Module):
    """A residual block: 3x3 (padded), 1x1, a strided 1x1 shortcut and a residual add."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 1)
        self.shortcut = nn.Conv2d(8, 16, 1)

    def forward(self, x):
        return ops.relu(self.conv2(ops.relu(self.conv1(x))) + self.shortcut(x))


def _reference(model, x):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.numpy())
    w = {k: torch.from_numpy(v.numpy()) for k, v in model.state_dict().items()}
    conv = torch.nn.functional.conv2d
    h = torch.relu(conv(t, w["conv1.weight"], w["conv1.bias"], padding=1))
    return torch.relu(conv(h, w["conv2.weight"], w["conv2.bias"]) + conv(t, w["shortcut.weight"],
                                                                        w["shortcut.bias"])).numpy()


def _conv_decisions(compiled):
    return [d for d in compiled._last.lowered.decisions if d.node.startswith("conv2d")]


@pytest.mark.parametrize("mode", conv_choice.MODES)
def test_every_choice_matches_pytorch_and_explain_names_it(mode, rng):
    model = _Block().eval()
    x = randn(rng, 2, 8, 9, 7)
    compiled = fxkit.compile(model, backend="numba", example_inputs=[x], conv_choice=mode)
    for inputs in (x, randn(rng, 2, 8, 9, 7)):  # a second call runs on the reused buffers
        np.testing.assert_allclose(compiled(inputs).numpy(), _reference(model, inputs), rtol=1e-4, atol=1e-5)
    decisions = _conv_decisions(compiled)
    assert len(decisions) == 3
    explained = compiled.explain()
    for d in decisions:
        assert str(d) in explained
    if mode == "numpy":
        assert all(d.choice == "numpy conv2d" and "conv_choice='numpy'" in d.reason for d in decisions)
    elif mode == "rules":
        assert all(d.choice != "numpy conv2d" and "measured" not in d.reason for d in decisions)
    else:
        assert all("measured" in d.reason and "ms, numpy conv2d" in d.reason for d in decisions)


def test_a_numpy_result_meeting_a_reordered_value_gets_its_rule_back(rng):
    # conv2d_1 (the 1x1) measured faster as numpy conv2d, but its NCHW result meets the channels-last
    # shortcut in the residual add: its rule comes back, and explain() says why.
    def measured(self, node, call, decision, calls):
        if node.name == "conv2d_1":
            return Decision(node.name, "numpy conv2d", "measured 2.000 ms, numpy conv2d 1.000 ms")
        return decision

    model = _Block().eval()
    x = randn(rng, 2, 8, 9, 7)
    with mock.patch.object(conv_choice.ConvChooser, "_measured", measured):
        compiled = fxkit.compile(model, backend="numba", example_inputs=[x], conv_choice="measure")
    decisions = {d.node: d for d in _conv_decisions(compiled)}
    assert decisions["conv2d_1"].choice == "1x1 GEMM, channels-last"
    assert "meets a reordered value in an elementwise group" in decisions["conv2d_1"].reason
    np.testing.assert_allclose(compiled(x).numpy(), _reference(model, x), rtol=1e-4, atol=1e-5)


def test_a_numpy_choice_that_meets_no_reordered_value_is_kept(rng):
    def measured(self, node, call, decision, calls):
        return Decision(node.name, "numpy conv2d", "measured 2.000 ms, numpy conv2d 1.000 ms")

    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    x = randn(rng, 1, 3, 12, 12)
    with mock.patch.object(conv_choice.ConvChooser, "_measured", measured):
        compiled = fxkit.compile(model, backend="numba", example_inputs=[x], conv_choice="measure")
    assert [d.choice for d in _conv_decisions(compiled)] == ["numpy conv2d", "numpy conv2d"]
    np.testing.assert_allclose(compiled(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_input_layouts_follow_the_lowered_convs(rng):
    model = nn.Sequential(nn.Conv2d(5, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 64, 1, 2), nn.SiLU(),
                          nn.Conv2d(64, 8, 1)).eval()
    x = randn(rng, 1, 5, 8, 8)
    seen = {}

    def measured(self, node, call, decision, calls):
        seen[node.name] = conv_choice.input_layout(node.args[0], calls)
        return decision

    with mock.patch.object(conv_choice.ConvChooser, "_measured", measured):
        fxkit.compile(model, backend="numba", example_inputs=[x], conv_choice="measure")
    # the second conv reads the first's channels-last result through its ReLU; the third the
    # channel-major result of the second (a 1x1 with 16 output pixels < 64 channels) through its SiLU
    assert seen == {"conv2d": "nchw", "conv2d_1": "channels-last", "conv2d_2": "channel-major"}


def test_convs_above_the_flop_budget_keep_their_rule_untimed(rng):
    conv = nn.Conv2d(8, 8, 3, padding=1).eval()
    x = randn(rng, 1, 8, 10, 10)
    with mock.patch.object(conv_choice, "MEASURE_MAX_FLOPS", 1):
        compiled = fxkit.compile(conv, backend="numba", example_inputs=[x], conv_choice="measure")
    (decision,) = _conv_decisions(compiled)
    assert decision.choice == "im2col, channels-last" and "flops: not timed" in decision.reason


def test_an_unknown_conv_choice_is_refused_with_the_modes():
    with pytest.raises(LoweringError, match="conv_choice is one of rules, measure, numpy, got 'fast'"):
        fxkit.compile(nn.Conv2d(3, 4, 3), backend="numba", conv_choice="fast")
