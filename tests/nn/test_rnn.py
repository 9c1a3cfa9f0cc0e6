"""nn.LSTM and nn.GRU against torch.nn.LSTM/GRU with copied weights: outputs and final
states for every layout (layers, bias, batch_first, bidirectional, unbatched, given
states), gradients, dropout between layers, and the paths a model takes through fxkit
(symbolic_trace with the layer as a leaf, infer_shapes, compile, ONNX export)."""
import numpy as np
import pytest

import fxkit
from fxkit import nn

torch = pytest.importorskip("torch")

from tests.nn.torch_compare import copy_state, fx, rand, th  # noqa: E402

LAYOUTS = [
    {},
    {"num_layers": 2, "bidirectional": True},
    {"num_layers": 3, "bias": False, "batch_first": True},
    {"bidirectional": True, "batch_first": True},
]
PAIRS = [(nn.LSTM, torch.nn.LSTM), (nn.GRU, torch.nn.GRU)]


def _pair(classes, kwargs, seed=0):
    fx_cls, torch_cls = classes
    torch.manual_seed(seed)
    reference = torch_cls(5, 6, **kwargs)
    layer = fx_cls(5, 6, **kwargs)
    copy_state(layer, reference)
    return layer, reference


def _flat(out):
    """(output, h) or (output, (h, c)) as a flat list."""
    output, states = out
    return [output] + (list(states) if isinstance(states, tuple) else [states])


def _close(got, want, tol=1e-5):
    for g, w in zip(_flat(got), _flat(want)):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("kwargs", LAYOUTS, ids=lambda k: "-".join(f"{a}={b}" for a, b in k.items()) or "default")
@pytest.mark.parametrize("classes", PAIRS, ids=["LSTM", "GRU"])
def test_matches_torch_with_copied_weights(rng, classes, kwargs):
    layer, reference = _pair(classes, kwargs)
    assert [k for k, _ in layer.named_parameters()] == [k for k, _ in reference.named_parameters()]
    assert all(tuple(p.shape) == tuple(q.shape) for p, q in zip(layer.parameters(), reference.parameters()))
    x = rand(rng, 4, 3, 5)
    _close(layer(fx(x)), reference(th(x)))


@pytest.mark.parametrize("classes", PAIRS, ids=["LSTM", "GRU"])
def test_given_states_and_unbatched_input(rng, classes):
    layer, reference = _pair(classes, {"num_layers": 2, "bidirectional": True})
    is_lstm = classes[0] is nn.LSTM
    h0, c0 = rand(rng, 4, 3, 6), rand(rng, 4, 3, 6)
    x = rand(rng, 5, 3, 5)
    states = ((fx(h0), fx(c0)), (th(h0), th(c0))) if is_lstm else (fx(h0), th(h0))
    _close(layer(fx(x), states[0]), reference(th(x), states[1]))
    single = x[:, 0]
    states = ((fx(h0[:, 0]), fx(c0[:, 0])), (th(h0[:, 0]), th(c0[:, 0]))) if is_lstm else (fx(h0[:, 0]), th(h0[:, 0]))
    _close(layer(fx(single), states[0]), reference(th(single), states[1]))


@pytest.mark.parametrize("classes", PAIRS, ids=["LSTM", "GRU"])
def test_gradients_match_torch(rng, classes):
    layer, reference = _pair(classes, {"num_layers": 2, "bidirectional": True, "batch_first": True})
    layer.to(fxkit.float64)
    reference.double()
    x = rng.standard_normal((3, 4, 5))
    xf, xt = fx(x).requires_grad_(), th(x).requires_grad_()
    (_flat(layer(xf))[0] ** 2).sum().backward()
    (_flat(reference(xt))[0] ** 2).sum().backward()
    np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-10)
    for (name, p), q in zip(layer.named_parameters(), reference.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-10, err_msg=name)


def test_dropout_between_layers_only_in_training(rng):
    fxkit.manual_seed(0)
    layer = nn.LSTM(5, 6, num_layers=2, dropout=0.5)
    x = fx(rand(rng, 4, 3, 5))
    layer.eval()
    first, second = layer(x)[0].numpy(), layer(x)[0].numpy()
    np.testing.assert_array_equal(first, second)
    layer.train()
    dropped = layer(x)[0].numpy()
    assert not np.allclose(dropped, first)
    single = nn.LSTM(5, 6, num_layers=1, dropout=0.5).train()  # no layer after the last: no dropout
    np.testing.assert_array_equal(single(x)[0].numpy(), single.eval()(x)[0].numpy())


def test_errors_name_the_expected_shapes():
    lstm = nn.LSTM(5, 6, num_layers=2)
    with pytest.raises(fxkit.ShapeError, match=r"Expected hidden size \[2, 3, 6\], got \[1, 3, 6\]"):
        lstm(fxkit.randn(4, 3, 5), (fxkit.zeros(1, 3, 6), fxkit.zeros(1, 3, 6)))
    with pytest.raises(fxkit.ShapeError, match="input_size. Expected 5, got 4"):
        lstm(fxkit.randn(4, 3, 4))
    with pytest.raises(fxkit.ShapeError, match="proj_size=3"):
        nn.LSTM(5, 6, proj_size=3)


class _Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 5)
        self.lstm = nn.LSTM(5, 6, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(12, 4, batch_first=True)
        self.head = nn.Linear(4, 3)

    def forward(self, tokens):
        hidden, _ = self.lstm(self.embed(tokens))
        out, last = self.gru(hidden)
        return self.head(out), last


def test_traced_as_leaves_then_shapes_compile_and_onnx(rng):
    fxkit.manual_seed(0)
    model = _Tagger().eval()
    gm = fxkit.symbolic_trace(model)
    targets = [n.target for n in gm.graph.nodes if n.op == "call"]
    assert "lstm" in targets and "gru" in targets
    tokens = fxkit.from_numpy(rng.integers(0, 11, (2, 7)))
    for got, want in zip(gm(tokens), model(tokens)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    from fxkit.transforms import infer_shapes

    shaped = infer_shapes(gm, (("N", 7), fxkit.int64))
    logits, last = shaped.graph.output_node().meta["tensor_meta"]
    assert [str(d) for d in logits.shape] == ["N", "7", "3"] and [str(d) for d in last.shape] == ["1", "N", "4"]
    compiled = fxkit.compile(model, backend="numpy", example_inputs=(tokens,))
    for got, want in zip(compiled(tokens), model(tokens)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    pytest.importorskip("onnxruntime")
    from tests.interop.zoo_onnx import relative_error, run_onnxruntime

    proto = fxkit.onnx.export(model, (tokens,))
    fresh = fxkit.from_numpy(rng.integers(0, 11, (3, 7)))
    for got, want in zip(run_onnxruntime(proto, (fresh,)), model(fresh)):
        assert relative_error(got, want) < 1e-5


def test_from_torch_converts_the_layers():
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.GRU(5, 6, bias=False, bidirectional=True)).eval()
    model = fxkit.from_torch(reference)
    assert isinstance(model[0], nn.GRU) and not model[0].bias
    x = np.random.default_rng(0).standard_normal((4, 2, 5)).astype(np.float32)
    _close(model[0](fx(x)), reference[0](th(x)))
