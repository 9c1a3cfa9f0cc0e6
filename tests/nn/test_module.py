"""The Module API: registration, traversal order, state_dict round trips, modes,
conversion, printing. Where PyTorch defines the behaviour, it is the oracle."""
import copy
import pickle

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import StateDictError

torch = pytest.importorskip("torch")

from tests.nn.torch_compare import copy_state  # noqa: E402


class Block(nn.Module):
    def __init__(self, lib):
        super().__init__()
        self.conv = lib.Conv2d(3, 4, 3, bias=False)
        self.bn = lib.BatchNorm2d(4)
        self.head = lib.Sequential(lib.ReLU(), lib.Flatten(), lib.Linear(4 * 4 * 4, 2))


class TorchBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, bias=False)
        self.bn = torch.nn.BatchNorm2d(4)
        self.head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 2))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(fxkit.ones(3))
        self.register_buffer("offset", fxkit.zeros(3))
        self.register_buffer("cache", fxkit.zeros(3), persistent=False)
        self.plain = fxkit.ones(2)  # a plain tensor attribute: neither parameter nor buffer

    def forward(self, x):
        return x * self.scale + self.offset


# -- registration and attribute protocol --------------------------------------------------

def test_setattr_registers_parameters_modules_buffers():
    m = Scaled()
    assert list(m._parameters) == ["scale"]
    assert list(m._buffers) == ["offset", "cache"]
    assert "plain" in m.__dict__ and "scale" not in m.__dict__
    assert m.scale is m._parameters["scale"]
    assert [n for n, _ in m.named_buffers()] == ["offset", "cache"]
    assert list(m.state_dict()) == ["scale", "offset"]  # non-persistent buffers stay out


def test_assigning_to_registered_names():
    m = Scaled()
    new = fxkit.full((3,), 2.0)
    m.offset = new  # a buffer stays a buffer
    assert m._buffers["offset"] is new
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'scale'"):
        m.scale = fxkit.ones(3)
    m.scale = None
    assert m.scale is None and list(m.parameters()) == []
    with pytest.raises(TypeError, match="cannot assign 'Linear' as parameter 'scale'"):
        m.scale = nn.Linear(2, 2)  # torch refuses this too: the name is a parameter slot
    lin = nn.Linear(2, 2)
    m.plain = lin  # a module replaces a plain attribute
    assert "plain" not in m.__dict__ and m._modules["plain"] is lin
    with pytest.raises(TypeError, match="child module 'plain'"):
        m.plain = 3


def test_delattr_and_dir():
    m = Scaled()
    assert {"scale", "offset", "cache", "forward"} <= set(dir(m))
    del m.scale
    del m.offset
    assert list(m.state_dict()) == []
    with pytest.raises(AttributeError, match="'Scaled' object has no attribute 'scale'"):
        m.scale


def test_register_errors():
    m = Scaled()
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("plain", fxkit.ones(1))
    with pytest.raises(KeyError, match="name must not contain"):
        m.register_parameter("a.b", None)
    with pytest.raises(TypeError, match=r"nn.Parameter\(...\)"):
        m.register_parameter("w", fxkit.ones(1))
    with pytest.raises(TypeError, match="buffer 'b'"):
        m.register_buffer("b", np.ones(1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("sub", 3)


def test_assign_before_init_is_explained():
    class Bad(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) call"):
        Bad()


def test_missing_forward_is_explained():
    with pytest.raises(AttributeError, match=r"missing the required forward\(\)"):
        nn.Module()(fxkit.ones(1))


# -- traversal -------------------------------------------------------------------------

def test_traversal_order_matches_torch():
    fx_m, ref = Block(nn), TorchBlock()
    assert [n for n, _ in fx_m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in fx_m.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert [n for n, _ in fx_m.named_modules()] == [n for n, _ in ref.named_modules()]
    assert [n for n, _ in fx_m.named_children()] == [n for n, _ in ref.named_children()]
    assert list(fx_m.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in fx_m.named_parameters(prefix="model", recurse=True)][0] == "model.conv.weight"
    assert [n for n, _ in fx_m.head.named_parameters(recurse=False)] == []


def test_shared_modules_and_parameters_counted_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    ref_lin = torch.nn.Linear(2, 2)
    ref = torch.nn.Sequential(ref_lin, torch.nn.ReLU(), ref_lin)
    assert [n for n, _ in seq.named_modules()] == [n for n, _ in ref.named_modules()]
    assert [n for n, _ in seq.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in seq.named_modules(remove_duplicate=False)] == \
        [n for n, _ in ref.named_modules(remove_duplicate=False)]
    assert list(seq.state_dict()) == list(ref.state_dict())  # state_dict keeps both names, like torch
    assert len(list(seq.children())) == 2


def test_get_submodule_parameter_buffer():
    m = Block(nn)
    assert m.get_submodule("") is m
    assert m.get_submodule("head.2") is m.head[2]
    assert m.get_parameter("head.2.bias") is m.head[2].bias
    assert m.get_buffer("bn.running_var") is m.bn.running_var
    with pytest.raises(AttributeError, match=r"Sequential at 'head' has no attribute `5` \(its submodules: 0, 1, 2\)"):
        m.get_submodule("head.5.weight")
    with pytest.raises(AttributeError, match="Linear has no parameter `scale`"):
        m.get_parameter("head.2.scale")


# -- state_dict -------------------------------------------------------------------------

def test_state_dict_values_share_storage():
    m = nn.Linear(3, 2)
    sd = m.state_dict()
    assert type(sd["weight"]) is fxkit.Tensor
    assert np.shares_memory(sd["weight"].numpy(), m.weight.numpy())
    assert m.state_dict(keep_vars=True)["weight"] is m.weight


def test_load_state_dict_from_torch_numpy_and_tensors(rng):
    fx_m, ref = Block(nn), TorchBlock()
    weight_before = fx_m.conv.weight
    result = copy_state(fx_m, ref)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    assert fx_m.conv.weight is weight_before  # copied in place: the Parameter object stays
    for key, value in ref.state_dict().items():
        np.testing.assert_array_equal(fx_m.state_dict()[key].numpy(), value.numpy())
    assert fx_m.bn.num_batches_tracked.dtype is fxkit.int64
    other = Block(nn)
    other.load_state_dict(ref.state_dict())  # torch's CPU tensors are read through numpy
    np.testing.assert_array_equal(other.bn.running_var.numpy(), ref.bn.running_var.numpy())
    other.load_state_dict(fx_m.state_dict())  # fxkit Tensors load too
    np.testing.assert_array_equal(other.head[2].weight.numpy(), fx_m.head[2].weight.numpy())


def test_load_state_dict_casts_to_parameter_dtype():
    m = nn.Linear(2, 2)
    m.load_state_dict({"weight": np.ones((2, 2), np.float64), "bias": np.arange(2)})
    assert m.weight.dtype is fxkit.float32 and m.bias.dtype is fxkit.float32
    np.testing.assert_array_equal(m.bias.numpy(), [0, 1])


def test_load_state_dict_assign_adopts_arrays():
    m = nn.Linear(2, 2)
    weight = np.ones((2, 2), np.float64)
    m.load_state_dict({"weight": weight, "bias": np.zeros(2, np.float64)}, assign=True)
    assert m.weight.dtype is fxkit.float64 and isinstance(m.weight, nn.Parameter)


def test_load_state_dict_strict_errors_like_torch():
    fx_m, ref = nn.Sequential(nn.Linear(3, 2)), torch.nn.Sequential(torch.nn.Linear(3, 2))
    bad = {"0.weight": np.ones((2, 4), np.float32), "0.extra": np.ones(1, np.float32)}
    with pytest.raises(RuntimeError) as torch_err:
        ref.load_state_dict({k: torch.from_numpy(v) for k, v in bad.items()})
    with pytest.raises(StateDictError) as fx_err:
        fx_m.load_state_dict(bad)
    message = str(fx_err.value)
    assert message.startswith("Error(s) in loading state_dict for Sequential:")
    assert 'Missing key(s) in state_dict: "0.bias".' in message
    assert 'Unexpected key(s) in state_dict: "0.extra".' in message
    assert ("size mismatch for 0.weight: copying a param with shape [2, 4] from checkpoint, "
            "the shape in current model is [2, 3].") in message
    assert "hint: pass strict=False" in message
    for line in ('Missing key(s) in state_dict: "0.bias".', 'Unexpected key(s) in state_dict: "0.extra".'):
        assert line in str(torch_err.value)
    assert isinstance(fx_err.value, RuntimeError)


def test_load_state_dict_non_strict_reports_keys_but_refuses_bad_shapes():
    m = nn.Linear(3, 2)
    result = m.load_state_dict({"weight": np.ones((2, 3), np.float32), "other": np.ones(1)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["other"]
    np.testing.assert_array_equal(m.weight.numpy(), np.ones((2, 3)))
    with pytest.raises(StateDictError, match="size mismatch for weight"):
        m.load_state_dict({"weight": np.ones((3, 3), np.float32)}, strict=False)
    with pytest.raises(StateDictError, match='parameter named "bias".*received str'):
        m.load_state_dict({"weight": np.ones((2, 3), np.float32), "bias": "zeros"})


# -- modes, conversion, apply -------------------------------------------------------------

def test_train_eval_recurse():
    m = Block(nn)
    assert m.training and m.head[2].training
    assert m.eval() is m
    assert not any(sub.training for sub in m.modules())
    m.train()
    assert all(sub.training for sub in m.modules())
    with pytest.raises(ValueError, match="boolean"):
        m.train("no")


def test_to_dtype_casts_floats_only_and_keeps_parameter_identity():
    m = Block(nn)
    weight = m.conv.weight
    assert m.to(fxkit.float64) is m
    assert m.conv.weight is weight and weight.dtype is fxkit.float64
    assert m.bn.running_mean.dtype is fxkit.float64
    assert m.bn.num_batches_tracked.dtype is fxkit.int64
    m.half()
    assert m.head[2].bias.dtype is fxkit.float16
    m.float()
    assert all(p.dtype is fxkit.float32 for p in m.parameters())
    m.double()
    assert all(p.dtype is fxkit.float64 for p in m.parameters())
    assert m.to("cpu", dtype=fxkit.float32).conv.weight.dtype is fxkit.float32
    with pytest.raises(TypeError, match="floating point dtypes, got int64"):
        m.to(fxkit.int64)


def test_to_device_cpu_keeps_tensors():
    m = nn.Linear(2, 2)
    data = m.weight.numpy()
    m.cpu()
    assert m.weight.device == fxkit.device("cpu") and m.weight.numpy() is data


@pytest.mark.cuda
def test_cuda_round_trip():
    if not fxkit.cuda.is_available():
        pytest.skip("needs a GPU with cupy")
    m = Block(nn).eval()
    x = fxkit.randn(2, 3, 6, 6)
    expected = m(x).numpy()
    m.cuda()
    assert all(p.device.type == "cuda" for p in m.parameters())
    assert m.bn.num_batches_tracked.device.type == "cuda"
    out = m(x.cuda()).cpu().numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    m.cpu()
    assert all(p.device.type == "cpu" for p in m.parameters())


def test_apply_visits_children_first():
    seen = []
    Block(nn).apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Conv2d", "BatchNorm2d", "ReLU", "Flatten", "Linear", "Sequential", "Block"]


def test_requires_grad_and_parameter_basics():
    p = nn.Parameter(fxkit.ones(2))
    assert p.requires_grad and isinstance(p, fxkit.Tensor)
    assert repr(p) == "Parameter containing:\ntensor([1., 1.])"
    m = nn.Linear(2, 2).requires_grad_(False)
    assert not any(q.requires_grad for q in m.parameters())
    assert nn.Parameter().shape == (0,)
    assert type(p + 1) is fxkit.Tensor  # ops on parameters give plain tensors


def test_zero_grad_drops_or_zeroes_every_parameter_gradient():
    m = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    m(fxkit.ones(4, 3)).sum().backward()
    m.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_deepcopy_and_pickle_keep_parameters():
    m = Block(nn)
    for clone in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert isinstance(clone.conv.weight, nn.Parameter) and clone.conv.weight.requires_grad
        assert clone.conv.weight is not m.conv.weight
        np.testing.assert_array_equal(clone.conv.weight.numpy(), m.conv.weight.numpy())
        assert list(clone.state_dict()) == list(m.state_dict())


# -- printing and constructor kwargs ------------------------------------------------------

def test_repr_matches_torch():
    assert repr(Block(nn)).replace("Block", "TorchBlock") == repr(TorchBlock())
    fx_list = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU()])
    ref_list = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), torch.nn.ReLU()])
    assert repr(fx_list) == repr(ref_list)
    assert repr(nn.ModuleList()) == repr(torch.nn.ModuleList())


LAYERS = [
    (nn.Linear, dict(in_features=3, out_features=4, bias=False)),
    (nn.Conv2d, dict(in_channels=4, out_channels=8, kernel_size=(3, 1), stride=2, padding=1, dilation=1,
                     groups=2, bias=False)),
    (nn.Conv2d, dict(in_channels=2, out_channels=2, kernel_size=3, padding="same")),
    (nn.BatchNorm1d, dict(num_features=5, eps=1e-3, momentum=None, affine=False)),
    (nn.BatchNorm2d, dict(num_features=5, track_running_stats=False)),
    (nn.LayerNorm, dict(normalized_shape=(2, 3), eps=1e-6, elementwise_affine=True, bias=False)),
    (nn.Embedding, dict(num_embeddings=10, embedding_dim=3, padding_idx=1, max_norm=2.0)),
    (nn.ReLU, dict(inplace=True)), (nn.GELU, dict(approximate="tanh")), (nn.SiLU, {}), (nn.Sigmoid, {}),
    (nn.Tanh, {}), (nn.Softmax, dict(dim=1)), (nn.LogSoftmax, dict(dim=-1)),
    (nn.MaxPool2d, dict(kernel_size=(3, 3), stride=2, padding=1, ceil_mode=True)),
    (nn.AvgPool2d, dict(kernel_size=2, count_include_pad=False)), (nn.AdaptiveAvgPool2d, dict(output_size=(1, 1))),
    (nn.Dropout, dict(p=0.2)), (nn.Dropout2d, dict(p=0.3, inplace=True)), (nn.Flatten, dict(start_dim=0)),
    (nn.Identity, {}), (nn.Sequential, {}), (nn.ModuleList, {}), (nn.ModuleDict, {}),
    (nn.MultiheadAttention, dict(embed_dim=8, num_heads=2, dropout=0.1, bias=False, kdim=4, vdim=6,
                                 batch_first=True)),
]


@pytest.mark.parametrize("cls, kwargs", LAYERS, ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_init_kwargs_rebuild_the_layer(cls, kwargs):
    import json

    layer = cls(**kwargs)
    saved = json.loads(json.dumps(layer._init_kwargs()))
    rebuilt = cls(**saved)
    assert repr(rebuilt) == repr(layer)
    assert rebuilt._init_kwargs() == saved
    assert [(n, tuple(p.shape)) for n, p in rebuilt.state_dict().items()] == \
        [(n, tuple(p.shape)) for n, p in layer.state_dict().items()]


@pytest.mark.parametrize("cls, kwargs", LAYERS[:20], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_layer_repr_matches_torch(cls, kwargs):
    ref_cls = getattr(torch.nn, cls.__name__)
    assert repr(cls(**kwargs)) == repr(ref_cls(**kwargs))


# -- containers ------------------------------------------------------------------------------

def test_sequential_indexing_slicing_and_editing():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and seq[0] is a and seq[-1] is c and list(seq) == [a, b, c]
    head = seq[1:]
    assert isinstance(head, nn.Sequential) and list(head) == [b, c] and list(head._modules) == ["1", "2"]
    seq.append(nn.Tanh())
    assert list(seq._modules) == ["0", "1", "2", "3"]
    del seq[1]
    assert list(seq._modules) == ["0", "1", "2"] and seq[1] is c
    seq.insert(0, nn.Identity())
    assert isinstance(seq[0], nn.Identity) and seq[1] is a
    seq[0] = b
    assert seq[0] is b and seq[np.int64(1)] is a
    assert seq.pop(0) is b and len(seq) == 3
    from fxkit.errors import IndexOutOfRangeError
    with pytest.raises(IndexOutOfRangeError, match="index 7 is out of range"):
        seq[7]


def test_sequential_from_ordered_dict_and_forward(rng):
    from collections import OrderedDict

    seq = nn.Sequential(OrderedDict([("fc", nn.Linear(4, 3)), ("act", nn.ReLU())]))
    assert seq.fc is seq[0]
    x = fxkit.from_numpy(rng.random((2, 4)).astype(np.float32))
    expected = np.maximum(x.numpy() @ seq.fc.weight.numpy().T + seq.fc.bias.numpy(), 0)
    np.testing.assert_allclose(seq(x).numpy(), expected, rtol=1e-6)


def test_module_list_and_dict():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(list(layers.parameters())) == 6
    layers.append(nn.ReLU())
    layers.insert(1, nn.Tanh())
    assert [type(m).__name__ for m in layers] == ["Linear", "Tanh", "Linear", "Linear", "ReLU"]
    assert list(layers._modules) == ["0", "1", "2", "3", "4"]
    del layers[0]
    assert type(layers[0]).__name__ == "Tanh" and len(layers) == 4
    assert isinstance(layers[1:3], nn.ModuleList) and len(layers[1:3]) == 2
    layers += [nn.Sigmoid()]
    assert type(layers[-1]).__name__ == "Sigmoid"
    heads = nn.ModuleDict({"cls": nn.Linear(8, 10)})
    heads["box"] = nn.Linear(8, 4)
    assert list(heads) == ["cls", "box"] and "box" in heads and len(heads) == 2
    assert [n for n, _ in heads.named_parameters()] == ["cls.weight", "cls.bias", "box.weight", "box.bias"]
    assert heads.pop("cls").out_features == 10 and list(heads.keys()) == ["box"]
