"""The cost model: FLOP rules against hand formulas and PyTorch's FlopCounterMode, bytes, parameters,
symbolic costs, the summary table, and ResNet-50's published 4.1 GMACs."""
import io

import numpy as np
import pytest

import fxkit
from fxkit import nn
from fxkit.errors import ShapeError
from fxkit.graph import map_arg
from fxkit.runtime.op import Op
from fxkit.runtime.registry import all_ops
from fxkit.transforms import Cost, Sym, estimate_cost, infer_shapes
from fxkit.transforms.cost import FLOP_RULES, KIND_FLOPS, CostModel, format_count, op_cost, summary
from fxkit.transforms.infer_shapes import spec_meta
from tests.transforms.model_paths import ZOO_SHAPES, zoo_model, zoo_params

N = Sym.symbol("N")
_DENSE = (fxkit.ops.conv2d, fxkit.ops.conv1d, fxkit.ops.conv_transpose2d)


def cost_of(fn, *specs):
    gm = fxkit.symbolic_trace(fn)
    return estimate_cost(gm, *specs), gm


def dense_flops(gm, *specs):
    """FLOPs of matmul-kind and convolution ops only, inside leaf bodies too (what FlopCounterMode counts)."""
    model = CostModel(gm)
    model.run(*(spec_meta(s) for s in specs))
    total = 0
    for graph in [gm.graph] + [body.graph for body in model.bodies.values()]:
        for n in graph.nodes:
            if n.op == "call" and isinstance(n.target, Op) and (n.target.kind == "matmul" or n.target in _DENSE):
                args = map_arg(n.args, lambda m: m.meta["tensor_meta"])
                kwargs = map_arg(n.kwargs, lambda m: m.meta["tensor_meta"])
                total += op_cost(n.target, args, kwargs, n.meta["tensor_meta"]).flops
    return total


def test_every_matmul_and_conv_op_has_a_rule_and_every_kind_a_default():
    for op in all_ops():
        if op.kind in ("matmul", "conv"):
            assert op in FLOP_RULES, f"{op.name} needs a FLOP rule"
        else:
            assert op.kind in KIND_FLOPS


@pytest.mark.parametrize("fn, specs, flops", [
    (lambda x, w: fxkit.ops.linear(x, w), [(8, 64), (32, 64)], 2 * 8 * 32 * 64),
    (lambda a, b: a @ b, [(5, 7, 3), (5, 3, 11)], 2 * 5 * 7 * 11 * 3),
    (lambda a, b: fxkit.ops.bmm(a, b), [(5, 7, 3), (5, 3, 11)], 2 * 5 * 7 * 11 * 3),
    (lambda c, a, b: fxkit.ops.addmm(c, a, b), [(11,), (7, 3), (3, 11)], 2 * 7 * 11 * 3),
    (lambda a, b: fxkit.ops.einsum("bij,bjk->bik", a, b), [(5, 7, 3), (5, 3, 11)], 2 * 5 * 7 * 11 * 3),
    (lambda a: fxkit.ops.einsum("ij->", a), [(7, 3)], 2 * 7 * 3),
    # 2 * N * OC * OH * OW * IC/groups * KH * KW
    (lambda x, w: fxkit.ops.conv2d(x, w, stride=2, padding=1), [(2, 8, 16, 16), (4, 8, 3, 3)],
     2 * 2 * 4 * 8 * 8 * 8 * 3 * 3),
    (lambda x, g: fxkit.ops.conv2d_weight_grad(x, (4, 8, 3, 3), g, 2, 1), [(2, 8, 16, 16), (2, 4, 8, 8)],
     2 * 2 * 4 * 8 * 8 * 8 * 3 * 3),  # as many multiply-adds as the forward convolution
    (lambda x, w: fxkit.ops.conv2d(x, w, groups=4), [(2, 8, 10, 10), (8, 2, 3, 3)], 2 * 2 * 8 * 8 * 8 * 2 * 3 * 3),
    (lambda x: fxkit.ops.max_pool2d(x, 2), [(2, 3, 8, 8)], 2 * 3 * 4 * 4 * 4),
    # integer kernels: the multiply-adds of their float counterparts
    (lambda x, w: fxkit.ops.quantized_linear(x, w, None, 0, 0, 1 << 30, 31, 0),
     [((8, 64), fxkit.int8), ((32, 64), fxkit.int8)], 2 * 8 * 32 * 64),
    (lambda x, w: fxkit.ops.quantized_conv2d(x, w, None, 0, 0, 1 << 30, 31, 0, stride=2, padding=1),
     [((2, 8, 16, 16), fxkit.int8), ((4, 8, 3, 3), fxkit.int8)], 2 * 2 * 4 * 8 * 8 * 8 * 3 * 3),
    (lambda x: x.relu() + 1, [(6, 5)], 30 + 30),
    (lambda x: x.sum(1), [(6, 5)], 30),
    (lambda x: x.view(30).t(), [(6, 5)], 0),
])
def test_flop_rules_match_the_formulas(fn, specs, flops):
    total, _ = cost_of(fn, *specs)
    assert total.flops == flops
    assert total.macs == flops // 2


def test_bytes_read_and_written():
    total, gm = cost_of(lambda x, y: (x + y).view(-1), (4, 8), ((8,), fxkit.float64))
    add = next(n for n in gm.graph.nodes if n.name == "add").meta["cost"]
    assert add == Cost(flops=32, bytes_read=4 * 8 * 4 + 8 * 8, bytes_written=4 * 8 * 8)
    view = next(n for n in gm.graph.nodes if n.name == "view").meta["cost"]
    assert view == Cost()  # a view moves no data
    assert total.bytes_written == 4 * 8 * 8


@pytest.mark.parametrize("name", ["lenet", "mlp", "lstm_cell", "resnet18"])
def test_dense_flops_match_pytorch_flop_counter(name):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from tests.models import torch_reference as ref

    makers = {"lenet": ref.Net, "mlp": ref.MLP, "lstm_cell": lambda: ref.LSTMCell(128, 256),
              "resnet18": ref.resnet18}
    reference = makers[name]().eval()
    shapes = ZOO_SHAPES[name]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        reference(*(torch.randn(*s) for s in shapes))
    model, _ = zoo_model(name)
    assert dense_flops(fxkit.symbolic_trace(model), *shapes) == counter.get_total_flops()


def test_attention_flops_match_pytorch_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    shapes = [(2, 4, 16, 8), (2, 4, 12, 8), (2, 4, 12, 6)]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        torch.nn.functional.scaled_dot_product_attention(*(torch.randn(*s) for s in shapes))
    fn = lambda q, k, v: fxkit.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
    assert dense_flops(fxkit.symbolic_trace(fn), *shapes) == counter.get_total_flops() == 2 * 2 * 4 * 16 * 12 * 14


def test_transformer_block_dense_flops_by_hand():
    # PyTorch's MultiheadAttention fast path is invisible to FlopCounterMode: count by hand.
    model, _ = zoo_model("transformer_block")
    n, length, e, hidden = 2, 16, 128, 512
    tokens = n * length
    expected = (2 * tokens * e * 3 * e          # q, k, v projections
                + 2 * 2 * n * length * length * e  # scores and weighted values, over all heads
                + 2 * tokens * e * e            # output projection
                + 2 * 2 * tokens * e * hidden)  # the MLP's two linears
    assert dense_flops(fxkit.symbolic_trace(model), (n, length, e)) == expected


@pytest.mark.parametrize("name", zoo_params())
def test_parameters_match_the_model_and_leaf_costs_come_from_bodies(name):
    model, _ = zoo_model(name)
    gm = fxkit.symbolic_trace(model)
    total = estimate_cost(gm, *ZOO_SHAPES[name])
    assert total.params == sum(int(np.prod(p.shape)) for p in model.parameters())
    assert total.param_bytes == 4 * total.params
    for node in gm.graph.find_nodes(op="call"):
        if isinstance(node.target, str) and isinstance(gm.get_submodule(node.target), (nn.Conv2d, nn.Linear)):
            assert node.meta["cost"].flops > 0 and node.meta["cost"].params > 0


def test_shared_module_parameters_count_once():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(self.fc(x))

    gm = fxkit.symbolic_trace(Twice())
    total = estimate_cost(gm, (4, 8))
    assert total.params == 8 * 8 + 8
    assert total.flops == 2 * (2 * 4 * 8 * 8)
    assert sum(n.meta["cost"].params for n in gm.graph.nodes) == 2 * (8 * 8 + 8)  # per call


def test_batchnorm_cost_follows_the_mode():
    gm = fxkit.symbolic_trace(nn.Sequential(nn.BatchNorm2d(4)))
    elements = 2 * 4 * 5 * 5
    assert estimate_cost(gm.eval(), (2, 4, 5, 5)).flops == 2 * elements  # scale and shift
    # training: batch mean and variance too, and the batch counter's increment (recorded, never run)
    assert estimate_cost(gm.train(), (2, 4, 5, 5)).flops == 6 * elements + 1
    assert int(gm.get_submodule("0").num_batches_tracked.numpy()) == 0


def test_symbolic_batch_costs_are_expressions():
    model, _ = zoo_model("resnet18")
    gm = fxkit.symbolic_trace(model)
    symbolic = estimate_cost(gm, ("N", 3, 64, 64))
    concrete = estimate_cost(gm, (2, 3, 64, 64))
    assert isinstance(symbolic.flops, Sym) and symbolic.flops.free_symbols == {"N"}
    assert symbolic.flops.subs(N=2) == concrete.flops
    assert symbolic.bytes_read.subs(N=2) == concrete.bytes_read
    assert symbolic.params == concrete.params


def test_costs_from_recorded_shapes():
    gm = fxkit.symbolic_trace(lambda x: x.relu())
    with pytest.raises(ShapeError, match=r"cost: the input %x has no recorded shape; pass input specs"):
        estimate_cost(gm)
    infer_shapes(gm, (3, 4))
    assert estimate_cost(gm).flops == 12


def test_summary_table():
    from rich.console import Console

    model, _ = zoo_model("lenet")
    gm = fxkit.symbolic_trace(model)
    console = Console(file=io.StringIO(), width=160)
    total = summary(gm, ("N", 1, 28, 28), console=console)
    shown = console.file.getvalue()
    for text in ("node", "target", "shape", "FLOPs", "params", "bytes read", "conv1", "total",
                 f"{total.flops} FLOPs", f"{total.macs} MACs", "parameters"):
        assert text in shown, text
    assert str(total.flops).startswith("N*")
    conv1 = next(line for line in shown.splitlines() if " conv1 " in line)
    assert "self.conv1" in conv1 and "f32[N, 10, 24, 24]" in conv1 and "N*" in conv1


def test_format_count():
    assert format_count(4_108_815_616, "MACs") == "4.11 GMACs"
    assert format_count(512) == "512"
    assert format_count(N * 2, "B") == "N*2 B"


@pytest.mark.slow
def test_resnet50_macs_match_the_published_figure():
    model, _ = zoo_model("resnet50")
    gm = fxkit.symbolic_trace(model)
    total = estimate_cost(gm, (1, 3, 224, 224))
    assert abs(total.macs / 4.1e9 - 1) < 0.02, format_count(total.macs, "MACs")
    assert total.params == 25_557_032  # torchvision's resnet50
    per_image = estimate_cost(gm, ("N", 3, 224, 224))
    assert per_image.macs.subs(N=1) == total.macs
