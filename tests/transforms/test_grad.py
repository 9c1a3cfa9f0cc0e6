"""`fxkit.transforms.grad`: one graph of forward and backward nodes, equal to eager autograd.

The references are eager autograd (the acceptance criterion; its gradients are
checked against PyTorch in tests/runtime/autograd/test_zoo_gradients.py) and
PyTorch itself for the digits classifier's loss.
"""
import inspect

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import AutogradError, GraphError
from fxkit.nn import functional as F
from fxkit.transforms import PassManager, fuse_elementwise, infer_shapes
from fxkit.transforms.grad import grad
from tests.transforms.model_paths import ZOO_SHAPES, zoo_model, zoo_params


def _total(out):
    return sum(o.sum() for o in out) if isinstance(out, tuple) else out.sum()


def _eager(model, inputs, names):
    """Eager autograd's gradients of the outputs' sum (without touching ``.grad``); a name
    is a parameter's or an argument's of ``model.forward``."""
    params = dict(model.named_parameters())
    xs = [x.detach().requires_grad_() if x.dtype.is_floating_point else x for x in inputs]
    arguments = dict(zip(inspect.signature(model.forward).parameters, xs))
    wrt = [params[n] if n in params else arguments[n] for n in names]
    return dict(zip(names, fxkit.autograd.grad(_total(model(*xs)), wrt)))


def _with_loss(net):
    """``net`` followed by the negative log-likelihood of class labels."""
    class Loss(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, target):
            return F.nll_loss(self.net(x), target)
    return Loss()


def _assert_grads(got, expected, rtol=1e-5):
    # NOTE: an absolute floor of 1e-6: a gradient that cancels to ~1e-7 (the weight of a LayerNorm
    # over two features feeding a softmax) is float32 rounding of O(1) terms, in either computation.
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        want = value.numpy()
        atol = max(rtol * np.abs(want).max(), 1e-6)
        np.testing.assert_allclose(got[name].numpy(), want, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("name", zoo_params())
def test_grad_equals_eager_autograd_on_every_zoo_model(name):
    model, inputs = zoo_model(name)
    gm = grad(model, example_inputs=inputs)
    gm.graph.lint()
    assert all(n.op != "call" or not isinstance(n.target, str) for n in gm.graph.nodes), "layers left as calls"
    out, grads = gm(*inputs)
    np.testing.assert_array_equal(_total(out).numpy(), _total(model(*inputs)).numpy())
    _assert_grads(grads, _eager(model, inputs, [n for n, _ in model.named_parameters()]))


@pytest.mark.parametrize("name", ["digits_net", "lenet", pytest.param("resnet18", marks=pytest.mark.slow)])
def test_training_mode_zoo_models_follow_eager_autograd(name, rng):
    model = fxkit.models.get(name)[0].train()  # its own copy: training updates BatchNorm's statistics
    inputs = [fxkit.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ZOO_SHAPES[name]]
    gm = grad(model, example_inputs=inputs)
    compiled = fxkit.compile(gm, backend="numpy", example_inputs=inputs)
    fxkit.manual_seed(5)  # dropout draws the same masks in each
    _, grads = gm(*inputs)
    fxkit.manual_seed(5)
    _, compiled_grads = compiled(*inputs)
    fxkit.manual_seed(5)
    expected = _eager(model, inputs, [n for n, _ in model.named_parameters()])
    _assert_grads(grads, expected)
    _assert_grads(compiled_grads, expected)


def _compile_params():
    params = []
    for p in zoo_params():
        name = p.values[0]
        params.append(pytest.param(name, "numpy", marks=p.marks, id=f"{name}-numpy"))
        params.append(pytest.param(name, "numba", marks=[pytest.mark.slow], id=f"{name}-numba"))
    return params


@pytest.mark.parametrize(("name", "backend"), _compile_params())
def test_compiled_gradient_graph_equals_eager_autograd(name, backend):
    model, inputs = zoo_model(name)
    compiled = fxkit.compile(grad(model, example_inputs=inputs), backend=backend, example_inputs=inputs)
    _, grads = compiled(*inputs)
    _assert_grads(grads, _eager(model, inputs, [n for n, _ in model.named_parameters()]))


class _ManyOps(nn.Module):
    """Rules beyond the zoo's: extrema and ties, norms, cat/stack/chunk, advanced indexing,
    embedding (its rule writes with setitem), layer norm, losses, pointwise functions, max_pool1d
    and adaptive_max_pool2d (recorded with their indices), glu and var_mean."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(fxkit.randn(3, 2))
        self.v = nn.Parameter(fxkit.randn(3, 2))
        self.e = nn.Embedding(5, 2, padding_idx=1)
        self.ln = nn.LayerNorm(2)

    def forward(self, x, idx):
        xw, xv = x * self.w, x * self.v
        y = fxkit.max(xw, self.v) + fxkit.amax(xw, 1, keepdim=True) + xw.max(1).values.unsqueeze(1)
        y = y + xv[:, :1].norm() + fxkit.cat([self.w, x]).sum(0) + fxkit.stack([self.v, x]).mean(0)
        y = y + (x.t() @ self.w).sum() + self.e(idx[:, 0]) + self.ln(xv).softmax(-1) + F.gelu(xw)
        a, b = xw.chunk(2, 1)
        y = y + fxkit.where(x > 0, self.w, self.v * 2) + a * b + F.mse_loss(xv, x)
        y = y + F.cross_entropy(xw, idx[:, 1] % 2) + xw[[0, 2]].sum()
        y = y + (self.v.exp() / (1 + self.w.abs())).log1p().sqrt() + self.w.pow(2) + (self.w * self.v).tanh().sigmoid()
        spread, mean = fxkit.var_mean(xw, 1, keepdim=True)
        y = y + F.max_pool1d(xw.unsqueeze(0), 2, 1).squeeze(0) + F.glu(xv, 1) + spread + mean
        y = y + F.adaptive_max_pool2d(xv.unsqueeze(0), (3, 1)).squeeze(0)
        return y.relu().clamp(max=3.0)


@pytest.mark.parametrize("backend", [None, "numpy", pytest.param("numba", marks=pytest.mark.slow)])
def test_rules_beyond_the_zoo_equal_eager_autograd(rng, backend):
    model = _ManyOps()
    x = fxkit.from_numpy(rng.standard_normal((3, 2)).astype(np.float32))
    idx = fxkit.from_numpy(rng.integers(0, 5, (3, 2)))
    gm = grad(model, example_inputs=[x, idx])
    run = gm if backend is None else fxkit.compile(gm, backend=backend, example_inputs=[x, idx])
    _, grads = run(x, idx)
    _assert_grads(grads, _eager(model, [x, idx], [n for n, _ in model.named_parameters()]))


def test_graph_prints_forward_then_backward_with_saved_values_as_edges():
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(fxkit.from_numpy(np.arange(6, dtype=np.float32).reshape(3, 2)))

        def forward(self, x):
            return (x @ self.w).relu()

    gm = grad(Tiny(), example_inputs=[(4, 3)])
    text = str(gm.graph)
    assert text.splitlines()[0] == "graph(x):"
    calls = [(n.target.name, [a.name for a in n.all_input_nodes]) for n in gm.graph.nodes if n.op == "call"]
    assert calls == [("matmul", ["x", "w"]), ("relu", ["matmul"]), ("ones_like", ["relu"]),
                     ("threshold_backward", ["ones_like", "relu"]), ("transpose", ["x"]),
                     ("matmul", ["transpose", "threshold_backward"])]
    assert text.splitlines()[-1] == "    return (%relu, {'w': %matmul_1})"
    assert "%threshold_backward : f32[4, 2]" in text
    backward = [n for n in gm.graph.nodes if "grad_of" in n.meta]
    assert [n.meta["grad_of"] for n in backward] == ["relu"] * 2 + ["matmul"] * 2
    np.testing.assert_array_equal(gm(fxkit.ones(4, 3))[1]["w"].numpy(), np.full((3, 2), 4.0, np.float32))


def test_inputs_named_in_wrt_get_gradients(rng):
    model, _ = zoo_model("lstm_cell")
    inputs = [fxkit.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ZOO_SHAPES["lstm_cell"]]
    gm = grad(model, wrt=["input", "cx", "weight_hh"], example_inputs=inputs)
    _, grads = gm(*inputs)
    _assert_grads(grads, _eager(model, inputs, ["input", "cx", "weight_hh"]))


def test_grad_outputs_become_inputs_after_the_models(rng):
    model, inputs = zoo_model("lstm_cell")
    gm = grad(model, grad_outputs=True, example_inputs=inputs)
    assert [n.name for n in gm.graph.find_nodes(op="placeholder")] == ["input", "hx", "cx", "grad_output_0",
                                                                       "grad_output_1"]
    seeds = [fxkit.from_numpy(rng.standard_normal(o.shape).astype(np.float32)) for o in model(*inputs)]
    _, grads = gm(*inputs, *seeds)
    params = dict(model.named_parameters())
    hy, cy = model(*inputs)
    expected = fxkit.autograd.grad([hy, cy], list(params.values()), grad_outputs=seeds)
    _assert_grads(grads, dict(zip(params, expected)))


def test_shapes_can_come_from_infer_shapes():
    model, inputs = zoo_model("mlp")
    gm = grad(infer_shapes(fxkit.symbolic_trace(model), *[tuple(x.shape) for x in inputs]))
    _assert_grads(gm(*inputs)[1], _eager(model, inputs, [n for n, _ in model.named_parameters()]))


def test_training_mode_dropout_and_batchnorm_follow_eager(rng):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            return F.dropout2d(self.bn(self.conv(x)).relu(), 0.3, training=self.training)

    model = Block().train()
    x = fxkit.from_numpy(rng.standard_normal((5, 3, 6, 6)).astype(np.float32))
    gm = grad(model, example_inputs=[x])
    assert "dropout2d" in [n.target.name for n in gm.graph.nodes if n.op == "call"]
    fxkit.manual_seed(7)
    out, grads = gm(x)
    after_graph = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.bn.running_mean.numpy()[:] = 0.0
    model.bn.running_var.numpy()[:] = 1.0
    model.bn.num_batches_tracked.numpy()[...] = 0
    fxkit.manual_seed(7)
    eager_out = model(x)
    params = dict(model.named_parameters())
    _assert_grads(grads, dict(zip(params, fxkit.autograd.grad(eager_out.sum(), list(params.values())))))
    np.testing.assert_array_equal(out.numpy(), eager_out.numpy())
    for key, value in model.state_dict().items():  # running stats and the batch counter, updated the same
        np.testing.assert_allclose(after_graph[key], value.numpy(), rtol=1e-6, err_msg=key)


def test_fused_and_pass_managed_gradient_graphs_keep_their_values():
    model, inputs = zoo_model("lstm_cell")
    gm = grad(model, example_inputs=inputs)
    out, grads = gm(*inputs)
    fused = PassManager([fuse_elementwise], example_inputs=inputs)(grad(model, example_inputs=inputs))
    assert len(fused.graph.nodes) < len(gm.graph.nodes)
    _assert_grads(fused(*inputs)[1], grads, rtol=1e-6)
    # a graph fused before differentiating gives the same derivative
    _assert_grads(grad(fuse_elementwise(fxkit.symbolic_trace(model)), example_inputs=inputs)(*inputs)[1], grads,
                  rtol=1e-6)


def test_sgd_steps_on_compiled_gradients_follow_eager_training(rng):
    fxkit.manual_seed(0)
    eager_net, _ = fxkit.models.get("digits_net")
    fxkit.manual_seed(0)
    graph_net, _ = fxkit.models.get("digits_net")
    x = fxkit.from_numpy(rng.standard_normal((16, 1, 8, 8)).astype(np.float32))
    y = fxkit.from_numpy(rng.integers(0, 10, 16))
    step = fxkit.compile(grad(_with_loss(graph_net), example_inputs=[x, y]), backend="numpy", example_inputs=[x, y])
    eager_opt = fxkit.optim.SGD(eager_net.parameters(), lr=0.1, momentum=0.9)
    graph_opt = fxkit.optim.SGD(graph_net.parameters(), lr=0.1, momentum=0.9)
    params = dict(graph_net.named_parameters())
    for _ in range(3):
        eager_opt.zero_grad()
        F.nll_loss(eager_net(x), y).backward()
        eager_opt.step()
        _, grads = step(x, y)
        for name, g in grads.items():
            params[name.removeprefix("net.")].grad = g
        graph_opt.step()
    for (name, p), q in zip(eager_net.named_parameters(), graph_net.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_digits_loss_gradients_match_torch(rng):
    torch = pytest.importorskip("torch")
    from tests.models.test_digits import TorchDigitsNet
    from tests.nn.torch_compare import assert_close, copy_state

    reference = TorchDigitsNet().eval()
    model, _ = fxkit.models.get("digits_net")
    copy_state(model, reference)
    x = (rng.random((8, 1, 8, 8)) * 2 - 1).astype(np.float32)
    y = rng.integers(0, 10, 8)
    torch.nn.functional.nll_loss(reference(torch.from_numpy(x)), torch.from_numpy(y)).backward()
    gm = grad(_with_loss(model), example_inputs=[x.shape, ((8,), fxkit.int64)])
    _, grads = gm(fxkit.from_numpy(x), fxkit.from_numpy(y))
    assert len(grads) == len(list(reference.parameters()))
    for name, p in reference.named_parameters():
        assert_close(grads[f"net.{name}"], p.grad, tol=1e-5)


# -- what the graph cannot differentiate, and bad calls ------------------------------------
@fxkit.wrap
def _opaque(x):
    return x.clamp(-1, 1)


class _Opaque(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        return _opaque(self.fc(x)).sum()


def test_a_call_without_a_grad_rule_is_named_with_its_source_line():
    with pytest.raises(AutogradError) as info:
        grad(_Opaque(), example_inputs=[(2, 3)])
    message = str(info.value)
    assert "the derivative of _opaque is not implemented" in message
    assert "test_grad.py" in message and "return _opaque(self.fc(x)).sum()" in message
    assert "node: %_opaque = call[" in message and "hint: register one with fxkit.runtime.autograd.defgrad" in message


def test_in_place_writes_into_differentiated_values_are_refused():
    class Writes(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            y = self.fc(x)
            y[0] = 0.0
            return y

    with pytest.raises(AutogradError, match=r"setitem writes in place into a value gradients flow through"
                                            r"(.|\n)*y\[0\] = 0.0(.|\n)*hint: compute the new value out of place"):
        grad(Writes(), example_inputs=[(2, 3)])


def test_non_differentiable_ops_stop_gradients(rng):
    class Gate(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(3, 3)
            self.b = nn.Linear(3, 3)
            self.unused = nn.Linear(3, 3)

        def forward(self, x):
            return (self.a(x) > 0).float() * self.b(x)

    model = Gate()
    x = fxkit.from_numpy(rng.standard_normal((4, 3)).astype(np.float32))
    _, grads = grad(model, example_inputs=[x])(x)
    assert list(grads) == ["b.weight", "b.bias"]
    _assert_grads(grads, _eager(model, [x], ["b.weight", "b.bias"]))


def test_bad_calls_say_what_to_pass():
    model, _ = zoo_model("mlp")
    with pytest.raises(GraphError, match=r"the input 'x' has no shape in node.meta; pass example_inputs"):
        grad(fxkit.symbolic_trace(model))
    with pytest.raises(GraphError, match=r"has shape \(N, 784\); the gradient graph is specialised"):
        grad(infer_shapes(fxkit.symbolic_trace(model), ("N", 784)))
    with pytest.raises(GraphError, match=r"wrt names \['fc9.weight'\], which are neither parameters nor inputs"):
        grad(model, wrt=["fc9.weight"], example_inputs=[(2, 784)])
