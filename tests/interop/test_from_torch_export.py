"""fxkit.from_torch's torch.export route against PyTorch eager.

Hand-written modules (tests/interop/torch_export_cases.py) cover buffers,
constants, in-place ops, views, a dynamic batch and sequence length, attention
with causal and padding masks and ``torch._assert``; each import matches
PyTorch within 1e-4 relative error, at two sizes from one import.
"""
import pytest

torch = pytest.importorskip("torch")
from torch import nn as tnn  # noqa: E402

import fxkit  # noqa: E402
from fxkit import nn  # noqa: E402
from fxkit.interop.torch_export import input_specs  # noqa: E402
from fxkit.transforms.infer_shapes import infer_shapes  # noqa: E402
from fxkit.transforms.symbolic import Sym  # noqa: E402
from tests.interop import torch_export_cases as C  # noqa: E402

TOLERANCE = 1e-4
N = torch.export.Dim("N", min=1, max=64)
S = torch.export.Dim("S", min=2, max=16)


def _import(module, inputs, dynamic_shapes=None):
    torch.manual_seed(0)
    return fxkit.from_torch(module, inputs, dynamic_shapes=dynamic_shapes)


def test_buffers_and_constants_keep_state_dict_names():
    torch.manual_seed(0)
    model = C.Buffers().eval()
    gm = _import(model, (C.random(3, 6),))
    assert isinstance(gm, fxkit.GraphModule)
    attrs = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    assert set(model.state_dict()) <= attrs
    assert {"offset", "table", "_tensor_constant0"} <= attrs
    assert set(dict(gm.named_parameters())) == set(dict(model.named_parameters()))
    assert [n.name for n in gm.graph.nodes if n.op == "placeholder"] == ["x"]
    assert C.compare(model, gm, (C.random(3, 6, seed=1),)) < TOLERANCE


def test_in_place_ops_become_functional_graph_ops():
    torch.manual_seed(0)
    model = C.InPlace().eval()
    gm = _import(model, (C.random(4, 5),), ({0: N},))
    for batch in (4, 7):
        assert C.compare(model, gm, (C.random(batch, 5, seed=batch) * 2,)) < TOLERANCE


@pytest.mark.slow
def test_views_follow_the_dynamic_batch_through_graph_arithmetic():
    model = C.Views().eval()
    gm = _import(model, (C.random(2, 4, 4),), ({0: N},))
    assert gm.graph.find_nodes(op="call", target=fxkit.ops.size), "the batch must be read, not baked in"
    for batch in (2, 5):
        assert C.compare(model, gm, (C.random(batch, 4, 4, seed=batch),)) < TOLERANCE
    infer_shapes(gm, *input_specs(gm))
    shapes = [m.shape for m in gm.graph.output_node().meta["tensor_meta"]]
    n = Sym.symbol("N")
    assert shapes == [(n, 8), (2 * n, 2), (n, 3)]


class _TailOfATable(tnn.Module):
    """MPT's ALiBi slice: ``max(0, table_length - length)`` on a symbolic length (``torch.sym_max``)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.randn(3, 20))

    def forward(self, x):
        start = max(0, self.table.size(1) - x.size(1))
        return x + self.table[:, start:].sum(0)[: x.size(1)]


def test_max_of_symbolic_sizes_is_graph_arithmetic():
    model = _TailOfATable().eval()
    gm = _import(model, (C.random(2, 7),), ({0: N, 1: S},))
    assert gm.graph.find_nodes(op="call", target=fxkit.ops.maximum)
    for batch, size in ((2, 7), (3, 12)):
        assert C.compare(model, gm, (C.random(batch, size, seed=size),)) < TOLERANCE
    # NOTE: Sym knows S >= 1 but not torch's S <= 16, so max(0, 20 - S) is left undecided, with the node named.
    with pytest.raises(fxkit.ShapeError, match=r"cannot decide -S \+ 20 < 0(.|\n)*%maximum"):
        infer_shapes(gm, *input_specs(gm))


def _attention_inputs(batch, length, seed):
    padding = torch.ones(batch, length, dtype=torch.int64)
    padding[0, length // 2:] = 0
    return C.random(batch, length, 16, seed=seed), padding


def test_attention_with_masks_at_two_batch_sizes_and_lengths():
    torch.manual_seed(0)
    model = C.Attention().eval()
    gm = _import(model, _attention_inputs(2, 8, 0), ({0: N, 1: S}, {0: N, 1: S}))
    for batch, length in ((2, 8), (3, 5)):
        assert C.compare(model, gm, _attention_inputs(batch, length, batch)) < TOLERANCE
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert [n.name for n in placeholders] == ["x", "padding_mask"]
    assert placeholders[0].meta["shape"] == (Sym.symbol("N"), Sym.symbol("S"), 16)
    infer_shapes(gm, *input_specs(gm))
    assert gm.graph.output_node().meta["tensor_meta"].shape == (Sym.symbol("N"), Sym.symbol("S"), 16)


def test_nodes_carry_the_torch_module_path_and_source_line():
    torch.manual_seed(0)
    model = C.Attention().eval()
    gm = _import(model, _attention_inputs(2, 8, 0))
    linear = [n for n in gm.graph.nodes if n.op == "call" and n.target is fxkit.ops.linear]
    assert [n.stack.module for n in linear] == ["qkv", "proj", "mlp.0", "mlp.2"]
    masked = next(n for n in gm.graph.nodes if n.op == "call" and n.target is fxkit.ops.masked_fill)
    assert masked.stack.filename.endswith("torch_export_cases.py")
    assert "masked_fill(~mask" in masked.stack.line and masked.stack.function == "forward"
    assert "(module " not in str(masked.stack) and "torch_export_cases.py" in str(masked.stack)
    assert str(linear[0].stack).endswith("(module qkv)")


def test_save_and_load_keep_the_import_and_its_module_paths(tmp_path):
    torch.manual_seed(0)
    model = C.Attention().eval()
    gm = _import(model, _attention_inputs(2, 8, 0), ({0: N, 1: S}, {0: N, 1: S}))
    fxkit.save(gm, tmp_path / "attention")
    loaded = fxkit.load(tmp_path / "attention")
    assert [n.stack for n in loaded.graph.nodes] == [n.stack for n in gm.graph.nodes]
    assert C.compare(model, loaded, _attention_inputs(3, 5, 1)) < TOLERANCE


@pytest.mark.slow
def test_convnet_with_batch_norm_keeps_composites_whole():
    torch.manual_seed(0)
    model = C.randomize_batch_norm(C.ConvNet().eval())
    gm = _import(model, (C.random(2, 3, 16, 16),), ({0: N},))
    targets = [n.target for n in gm.graph.nodes if n.op == "call"]
    for op in (fxkit.ops.conv2d, fxkit.ops.batch_norm, fxkit.ops.linear, fxkit.ops.log_softmax):
        assert op in targets
    for batch in (2, 3):
        assert C.compare(model, gm, (C.random(batch, 3, 16, 16, seed=batch),)) < TOLERANCE


def test_vision_ops_come_in_whole_at_two_batch_sizes():
    model = C.VisionOps().eval()
    gm = _import(model, (C.random(2, 48),), ({0: N},))
    targets = {n.target.name for n in gm.graph.nodes if n.op == "call" and hasattr(n.target, "name")}
    assert {"pixel_shuffle", "pixel_unshuffle", "var_mean", "std_mean", "isinf", "isfinite", "glu", "max_pool1d",
            "avg_pool1d", "unfold"} <= targets
    for batch in (2, 5):
        assert C.compare(model, gm, (C.random(batch, 48, seed=batch),)) < TOLERANCE


def test_a_tree_of_standard_layers_keeps_the_layer_route():
    model = tnn.Sequential(tnn.Linear(4, 8), tnn.ReLU(), tnn.Linear(8, 2)).eval()
    converted = fxkit.from_torch(model, (C.random(3, 4),))
    assert isinstance(converted, nn.Sequential) and isinstance(converted[0], nn.Linear)


class _DataDependent(tnn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x
        return -x


class _Unmapped(tnn.Module):
    def __init__(self):
        super().__init__()
        self.inner = tnn.Linear(3, 3)

    def forward(self, x):
        return torch.special.bessel_j0(self.inner(x))


class _Counter(tnn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x * 2


def test_capture_errors_name_the_frame_the_construct_and_the_fix():
    with pytest.raises(fxkit.TraceError) as info:
        fxkit.from_torch(_DataDependent(), (C.random(2, 3),))
    message = str(info.value)
    assert "torch.export cannot capture _DataDependent: Python control flow" in message
    assert "test_from_torch_export.py:" in message and "if x.sum() > 0:" in message
    assert "hint: compute both branches and pick with torch.where" in message


def test_unmapped_aten_op_names_the_op_the_module_and_the_line():
    with pytest.raises(fxkit.GraphError) as info:
        fxkit.from_torch(_Unmapped(), (C.random(2, 3),))
    message = str(info.value)
    assert "the ATen op aten.special_bessel_j0.default (in the top-level module) has no fxkit registry op" in message
    assert "return torch.special.bessel_j0(self.inner(x))" in message and "test_from_torch_export.py:" in message
    assert "hint: add an entry for aten.special_bessel_j0.default to fxkit/interop/torch_export/aten_table.py" \
        in message


def test_buffer_updates_are_refused_with_the_buffer_named():
    with pytest.raises(fxkit.GraphError, match=r"updates 'calls' in place \(buffer mutation\)[\s\S]*hint: import"):
        fxkit.from_torch(_Counter(), (C.random(2, 3),))


def test_dynamic_shapes_need_example_inputs():
    with pytest.raises(TypeError, match="pass example_inputs too"):
        fxkit.from_torch(C.Views(), dynamic_shapes=({0: N},))


def test_summary_and_split_pipeline_show_the_torch_modules():
    import io

    import numpy as np
    from rich.console import Console

    from fxkit.transforms.cost import summary
    from fxkit.transforms.split_pipeline import split_pipeline

    torch.manual_seed(0)
    model = C.Buffers().eval()
    gm = _import(model, (C.random(3, 6),), ({0: N},))
    console = Console(file=io.StringIO(), width=200)
    summary(gm, *input_specs(gm), console=console)
    shown = console.file.getvalue()
    assert "module" in shown.splitlines()[2]
    assert next(line for line in shown.splitlines() if " linear_1 " in line).split("│")[2].strip() == "blocks.1"
    console = Console(file=io.StringIO(), width=200)
    parent = split_pipeline(gm, [(4, 6)], n_stages=2, console=console)
    assert "(blocks.0)" in console.file.getvalue() or "(blocks.1)" in console.file.getvalue()
    x = C.random(4, 6, seed=3)
    expected, actual = gm(fxkit.from_numpy(x.numpy())), parent(fxkit.from_numpy(x.numpy()))
    np.testing.assert_array_equal(actual.numpy(), expected.numpy())


def test_no_grad_and_autocast_regions_are_inlined():
    torch.manual_seed(0)
    model = C.Regions().eval()
    gm = _import(model, (C.random(2, 3),))
    assert gm.graph.find_nodes(op="call", target=fxkit.ops.linear)
    assert C.compare(model, gm, (C.random(2, 3, seed=1),)) < TOLERANCE
