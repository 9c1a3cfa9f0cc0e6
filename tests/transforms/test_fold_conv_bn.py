"""fold_conv_bn: eval-mode Conv2d + BatchNorm2d pairs become one Conv2d; ResNet-18 loses every
BatchNorm and stays within 1e-5 relative error of a float64 run; the pairs that must not fold stay."""
import copy

import numpy as np
import pytest

import fxkit
import fxkit.models
from fxkit import nn
from fxkit.transforms import FoldConvBN, PassManager, fold_conv_bn
from tests.transforms.model_paths import check_model_paths, zoo_model, zoo_params


def randn(rng, *shape):
    return fxkit.from_numpy(rng.standard_normal(shape).astype(np.float32))


def randomize_batchnorms(model, rng):
    """Statistics and affine parameters far from the identity, so folding has work to do."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean._data[...] = rng.normal(0, 0.5, c)
            m.running_var._data[...] = rng.uniform(0.5, 2.0, c)
            if m.weight is not None:
                m.weight._data[...] = rng.uniform(0.5, 1.5, c)
                m.bias._data[...] = rng.normal(0, 0.3, c)
    return model


def float64_reference(model, inputs):
    """The eager model run in float64 (a copy): the reference folding must stay close to."""
    wide = copy.deepcopy(model).double()
    return wide(*(x.double() for x in inputs)).numpy()


def relative_error(out, ref):
    return np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref)


def batchnorm_nodes(gm):
    return [n for n in gm.graph.nodes if n.is_module(gm, nn.BatchNorm2d) or n.is_op("batch_norm")]


@pytest.mark.slow
def test_resnet18_in_eval_mode_loses_every_batchnorm(rng):
    fxkit.manual_seed(0)
    model, _ = fxkit.models.get("resnet18")
    randomize_batchnorms(model, rng)
    x = randn(rng, 2, 3, 64, 64)
    gm = fxkit.symbolic_trace(model)
    assert len(batchnorm_nodes(gm)) == 20
    gm = fold_conv_bn(gm)
    gm.graph.lint()
    assert batchnorm_nodes(gm) == []
    assert not any(isinstance(m, nn.BatchNorm2d) for m in gm.modules())
    assert relative_error(gm(x).numpy(), float64_reference(model, [x])) < 1e-5
    # The model itself is untouched: its convs are not the folded ones.
    assert gm.conv1 is not model.conv1 and any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


class ConvBN(nn.Module):
    def __init__(self, bias=True, affine=True, track_running_stats=True):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=bias)
        self.bn = nn.BatchNorm2d(6, affine=affine, track_running_stats=track_running_stats)

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


@pytest.mark.parametrize("bias", [True, False], ids=["conv_bias", "conv_no_bias"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no_affine"])
def test_folding_matches_float64(rng, bias, affine):
    model = randomize_batchnorms(ConvBN(bias=bias, affine=affine), rng).eval()
    x = randn(rng, 2, 3, 8, 8)
    gm = fold_conv_bn(fxkit.symbolic_trace(model))
    assert [n.target for n in gm.graph.nodes if n.op == "call" and type(n.target) is str] == ["conv"]
    assert isinstance(gm.conv, nn.Conv2d) and gm.conv is not model.conv and gm.conv.bias is not None
    assert model.conv.bias is None if not bias else model.conv.bias is not gm.conv.bias
    assert relative_error(gm(x).numpy(), float64_reference(model, [x])) < 1e-5


def test_folding_on_each_device(rng, device):
    model = randomize_batchnorms(ConvBN(bias=False), rng).eval()
    x = randn(rng, 2, 3, 8, 8)
    reference = float64_reference(model, [x])
    gm = fold_conv_bn(fxkit.symbolic_trace(copy.deepcopy(model).to(device)))
    assert gm.conv.weight.device == fxkit.device(device)
    out = gm(x.to(device)).cpu().numpy()
    assert relative_error(out, reference) < 1e-5


def test_the_conv_node_keeps_its_meta_and_takes_the_batchnorm_s():
    gm = fxkit.symbolic_trace(ConvBN().eval())
    conv, bn = gm.graph.find_nodes(op="call")[:2]
    bn.meta["shape"] = (2, 6, 8, 8)
    stack = conv.stack
    gm = fold_conv_bn(gm)
    (conv,) = [n for n in gm.graph.nodes if n.op == "call" and n.target == "conv"]
    assert conv.stack is stack and conv.meta["shape"] == (2, 6, 8, 8)


def test_training_mode_is_left_alone():
    gm = fold_conv_bn(fxkit.symbolic_trace(ConvBN()))
    assert len(batchnorm_nodes(gm)) == 1


def test_batchnorm_without_running_statistics_is_left_alone():
    gm = fold_conv_bn(fxkit.symbolic_trace(ConvBN(track_running_stats=False).eval()))
    assert len(batchnorm_nodes(gm)) == 1


def test_conv_output_with_another_user_is_left_alone(rng):
    class M(ConvBN):
        def forward(self, x):
            y = self.conv(x)
            return self.bn(y) + y

    model = randomize_batchnorms(M(), rng).eval()
    gm = fold_conv_bn(fxkit.symbolic_trace(model))
    assert len(batchnorm_nodes(gm)) == 1 and gm.conv is model.conv


def test_a_conv_called_twice_keeps_its_other_call(rng):
    class M(ConvBN):
        def forward(self, x):
            return self.bn(self.conv(x)) + self.conv(x * 2)

    model = randomize_batchnorms(M(), rng).eval()
    x = randn(rng, 2, 3, 8, 8)
    gm = fold_conv_bn(fxkit.symbolic_trace(model))
    gm.graph.lint()
    targets = [n.target for n in gm.graph.nodes if n.op == "call" and type(n.target) is str]
    assert targets == ["conv_bn_folded", "conv"] and gm.conv is model.conv
    assert relative_error(gm(x).numpy(), float64_reference(model, [x])) < 1e-5


def test_in_a_pass_manager_with_its_tolerance(rng):
    model = randomize_batchnorms(ConvBN(), rng).eval()
    x = randn(rng, 2, 3, 8, 8)
    gm = PassManager([FoldConvBN()], example_inputs=(x,))(fxkit.symbolic_trace(model))
    assert batchnorm_nodes(gm) == []


@pytest.mark.parametrize("name", zoo_params())
def test_zoo_outputs_stay_close(name):
    model, inputs = zoo_model(name)
    _, transformed = check_model_paths(model, inputs, passes=[FoldConvBN()])
    assert batchnorm_nodes(transformed["fold_conv_bn"]) == []
