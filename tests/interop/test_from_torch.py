"""fxkit.from_torch and fxkit.load_torch_state_dict against PyTorch itself.

Every zoo architecture's PyTorch twin (tests/models/torch_reference.py, plus the
digits net written here) converts to an fxkit module computing PyTorch's
outputs within 1e-5 relative error; so does each standard layer on its own.
"""
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as TF  # noqa: E402
from torch import nn as tnn  # noqa: E402

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from tests.interop.zoo_onnx import as_tuple, relative_error  # noqa: E402
from tests.models import torch_reference as R  # noqa: E402

TOLERANCE = 1e-5


class TorchDigitsNet(tnn.Module):
    """fxkit.models.DigitsNet written in PyTorch."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = tnn.Conv2d(1, 10, kernel_size=3, padding=1)
        self.conv2 = tnn.Conv2d(10, 20, kernel_size=3, padding=1)
        self.fc1 = tnn.Linear(80, 50)
        self.fc2 = tnn.Linear(50, num_classes)

    def forward(self, x):
        x = TF.relu(TF.max_pool2d(self.conv1(x), 2))
        x = TF.relu(TF.max_pool2d(self.conv2(x), 2))
        x = TF.relu(self.fc1(x.view(-1, 80)))
        x = TF.dropout(x, 0.5, training=self.training)
        return TF.log_softmax(self.fc2(x), dim=1)


ZOO_TWINS = {
    "lenet": (R.Net, [(4, 1, 28, 28)]),
    "digits_net": (TorchDigitsNet, [(4, 1, 8, 8)]),
    "mlp": (R.MLP, [(4, 784)]),
    "lstm_cell": (lambda: R.LSTMCell(128, 256), [(4, 128), (4, 256), (4, 256)]),
    "transformer_block": (R.TransformerBlock, [(2, 16, 128)]),
    "resnet18": (R.resnet18, [(2, 3, 64, 64)]),
    "resnet50": (R.resnet50, [(1, 3, 64, 64)]),
}


def _randomize_batch_norm(module, generator):
    """Non-trivial running statistics and affine parameters, so BatchNorm is really tested."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (tnn.BatchNorm1d, tnn.BatchNorm2d)):
                m.running_mean.uniform_(-0.5, 0.5, generator=generator)
                m.running_var.uniform_(0.5, 1.5, generator=generator)
                if m.affine:
                    m.weight.uniform_(0.5, 1.5, generator=generator)
                    m.bias.uniform_(-0.5, 0.5, generator=generator)


def _compare(torch_module, fx_module, shapes, seed=0, integer_inputs=()):
    rng = np.random.default_rng(seed)
    arrays = [rng.integers(0, 10, s) if i in integer_inputs else rng.standard_normal(s).astype(np.float32)
              for i, s in enumerate(shapes)]
    with torch.no_grad():
        expected = as_tuple(torch_module(*(torch.from_numpy(a) for a in arrays)))
    actual = as_tuple(fx_module(*(fxkit.from_numpy(a) for a in arrays)))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        if e is None:
            assert a is None
        else:
            assert relative_error(a, e.numpy()) < TOLERANCE


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n.startswith("resnet") else [])
                                  for n in ZOO_TWINS])
def test_zoo_architectures_convert(name):
    build, shapes = ZOO_TWINS[name]
    generator = torch.Generator().manual_seed(0)
    torch_model = build().eval()
    _randomize_batch_norm(torch_model, generator)
    fx_model = fxkit.from_torch(torch_model)
    assert not fx_model.training
    assert set(fx_model.state_dict()) == set(torch_model.state_dict())
    _compare(torch_model, fx_model, shapes)


def test_converted_module_is_a_graph_module_of_fxkit_layers():
    fx_model = fxkit.from_torch(R.resnet18().eval())
    assert isinstance(fx_model, fxkit.GraphModule)
    assert isinstance(fx_model.get_submodule("layer1.0.conv1"), nn.Conv2d)
    assert isinstance(fx_model.get_submodule("layer2.0.downsample.1"), nn.BatchNorm2d)
    assert fx_model.graph.find_nodes(op="call", target="fc")


LAYERS = [
    (lambda: tnn.Linear(6, 3), [(4, 6)]),
    (lambda: tnn.Linear(6, 3, bias=False), [(2, 5, 6)]),
    (lambda: tnn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2), [(2, 4, 9, 9)]),
    (lambda: tnn.Conv2d(3, 4, (3, 1), padding="same", dilation=2, bias=False), [(2, 3, 8, 8)]),
    (lambda: tnn.BatchNorm1d(5), [(4, 5)]),
    (lambda: tnn.BatchNorm2d(3, eps=1e-3, affine=False), [(2, 3, 4, 4)]),
    (lambda: tnn.LayerNorm([3, 4], eps=1e-4), [(2, 3, 4)]),
    (lambda: tnn.LayerNorm(4, bias=False), [(2, 4)]),
    (lambda: tnn.ReLU(), [(3, 4)]),
    (lambda: tnn.GELU(approximate="tanh"), [(3, 4)]),
    (lambda: tnn.SiLU(), [(3, 4)]),
    (lambda: tnn.Sigmoid(), [(3, 4)]),
    (lambda: tnn.Tanh(), [(3, 4)]),
    (lambda: tnn.Softmax(dim=0), [(3, 4)]),
    (lambda: tnn.LogSoftmax(dim=1), [(3, 4)]),
    (lambda: tnn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), [(1, 2, 7, 7)]),
    (lambda: tnn.AvgPool2d(2, count_include_pad=False, padding=1), [(1, 2, 6, 6)]),
    (lambda: tnn.AdaptiveAvgPool2d((2, 3)), [(1, 2, 6, 6)]),
    (lambda: tnn.Dropout(0.3), [(3, 4)]),
    (lambda: tnn.Dropout2d(), [(2, 3, 4, 4)]),
    (lambda: tnn.Flatten(0, 1), [(2, 3, 4)]),
    (lambda: tnn.Identity(), [(3, 4)]),
    (lambda: tnn.MultiheadAttention(8, 2, kdim=6, vdim=5), [(5, 2, 8), (7, 2, 6), (7, 2, 5)]),
    (lambda: tnn.MultiheadAttention(8, 4, bias=False, batch_first=True), [(2, 5, 8), (2, 5, 8), (2, 5, 8)]),
    (lambda: tnn.ReLU6(), [(3, 4)]),
    (lambda: tnn.Hardsigmoid(), [(3, 4)]),
    (lambda: tnn.Hardswish(), [(3, 4)]),
    (lambda: tnn.Mish(), [(3, 4)]),
    (lambda: tnn.GroupNorm(2, 4, eps=1e-3), [(2, 4, 3, 3)]),
    (lambda: tnn.RMSNorm([3, 4], eps=1e-5), [(2, 3, 4)]),
    (lambda: tnn.InstanceNorm1d(3, affine=True), [(2, 3, 6)]),
    (lambda: tnn.InstanceNorm2d(3, track_running_stats=True), [(2, 3, 4, 4)]),
]


@pytest.mark.parametrize("build, shapes", LAYERS, ids=lambda v: None if isinstance(v, list) else repr(v()))
def test_standard_layers_convert_one_for_one(build, shapes):
    torch.manual_seed(0)
    torch_layer = build().eval()
    _randomize_batch_norm(torch_layer, torch.Generator().manual_seed(1))
    fx_layer = fxkit.from_torch(torch_layer)
    assert type(fx_layer).__name__ == type(torch_layer).__name__
    assert set(fx_layer.state_dict()) == set(torch_layer.state_dict())
    _compare(torch_layer, fx_layer, shapes)


def test_embedding_converts():
    torch_layer = tnn.Embedding(10, 4, padding_idx=0).eval()
    fx_layer = fxkit.from_torch(torch_layer)
    assert fx_layer.padding_idx == 0
    _compare(torch_layer, fx_layer, [(3, 5)], integer_inputs={0})


def test_containers_keep_names_types_and_modes():
    torch_model = tnn.Sequential(OrderedDict([
        ("features", tnn.ModuleList([tnn.Linear(4, 8), tnn.ReLU()])),
        ("heads", tnn.ModuleDict({"a": tnn.Linear(8, 2), "b": tnn.Linear(8, 3)})),
        ("drop", tnn.Dropout()),
    ])).train()
    fx_model = fxkit.from_torch(torch_model)
    assert isinstance(fx_model, nn.Sequential) and fx_model.training
    assert isinstance(fx_model.features, nn.ModuleList) and isinstance(fx_model.heads, nn.ModuleDict)
    assert list(fx_model.state_dict()) == list(torch_model.state_dict())
    assert all(m.training for m in fx_model.modules())


class _Functional(tnn.Module):
    """A custom forward over torch functions, Tensor methods and operators."""

    def __init__(self):
        super().__init__()
        self.scale = tnn.Parameter(torch.rand(4) + 0.5)
        self.register_buffer("shift", torch.randn(4))

    def forward(self, x, y):
        z = torch.cat([x, y], dim=1).view(x.shape[0], 2, -1).transpose(1, 2)
        z = TF.gelu(z.flatten(1)) * 2 - y.repeat(1, 2).sigmoid() / 3
        w = x * self.scale + self.shift + (x.T @ y).mT.sum(0) / 8
        return z.softmax(-1), torch.where(w > 0, w, -w).sum(dim=1, keepdim=True), w[:, 1:3].max(1)[0]


def test_custom_forward_over_functions_methods_and_operators():
    torch.manual_seed(0)
    torch_model = _Functional().eval()
    fx_model = fxkit.from_torch(torch_model)
    assert set(fx_model.state_dict()) == {"scale", "shift"}
    _compare(torch_model, fx_model, [(3, 4), (3, 4)])


class _NewOps(tnn.Module):
    """A custom forward over the activations, sorts, norms and attention added for imported models."""

    def forward(self, x, y):
        q = x.view(x.shape[0], 2, 3, 1).expand(x.shape[0], 2, 3, 2)
        k = y.view(y.shape[0], 2, 3, 1)[:, :1].expand(y.shape[0], 1, 3, 4)[..., :2]
        attended = TF.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True)
        values, indices = torch.topk(x, 2, dim=1)
        ordered = x.sort(dim=1, descending=True)[0]
        return (TF.relu6(x * 4) + TF.hardswish(x) + TF.hardsigmoid(y) + TF.mish(x), values, indices, ordered,
                x.argsort(1), TF.rms_norm(x, [6]), TF.group_norm(x.view(-1, 6, 1), 2),
                TF.instance_norm(x.view(-1, 2, 3)), attended, torch.cumsum(x, 1), torch.roll(x, 2, 1), x.triu(1))


def test_custom_forward_over_the_new_ops():
    torch.manual_seed(0)
    fx_model = fxkit.from_torch(_NewOps().eval())
    _compare(_NewOps().eval(), fx_model, [(3, 6), (3, 6)])


@pytest.mark.slow
def test_load_torch_state_dict_into_a_matching_fxkit_model():
    torch_model = R.resnet18(num_classes=10).eval()
    _randomize_batch_norm(torch_model, torch.Generator().manual_seed(2))
    fx_model = fxkit.models.resnet18(num_classes=10).eval()
    result = fxkit.load_torch_state_dict(fx_model, torch_model.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    _compare(torch_model, fx_model, [(2, 3, 32, 32)])
    with pytest.raises(Exception, match="fc.weight"):
        fxkit.load_torch_state_dict(fxkit.models.resnet18(num_classes=5), torch_model.state_dict())


class _UsesConv1d(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv = tnn.Conv1d(2, 2, 3)

    def forward(self, x):
        return self.conv(x)


class _DataDependent(tnn.Module):
    def forward(self, x):
        return x if x.sum() > 0 else -x


class _InPlace(tnn.Module):
    def forward(self, x):
        return (x * 2).add_(1)


def test_errors_name_the_layer_function_or_method():
    with pytest.raises(fxkit.GraphError, match=r"the layer 'conv' is a torch.nn.modules.conv.Conv1d, which has no "
                                               r"fxkit equivalent[\s\S]*hint: fxkit converts .*Conv2d"):
        fxkit.from_torch(_UsesConv1d())
    with pytest.raises(fxkit.TraceError, match=r"torch.fx could not trace _DataDependent[\s\S]*hint:"):
        fxkit.from_torch(_DataDependent())
    with pytest.raises(fxkit.GraphError, match=r"method 'add_' has no fxkit equivalent\n  hint: write x = x.add"):
        fxkit.from_torch(_InPlace())
    with pytest.raises(TypeError, match="expected a torch.nn.Module"):
        fxkit.from_torch(fxkit.nn.Linear(2, 2))


def test_import_fxkit_does_not_import_torch():
    code = "import sys, fxkit; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
