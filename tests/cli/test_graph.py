"""``fxkit graph``: the printed graph with shapes, the generated code, the table, fusion."""
import pytest

from tests.cli.run import fxkit, write_models

pytestmark = pytest.mark.slow

# LeNet on the zoo's example input (64, 1, 28, 28), worked out by hand: conv 5x5 -> 24, pool -> 12,
# conv 5x5 -> 8, pool -> 4, 20 * 4 * 4 = 320 features.
LENET_LINES = [
    "%x            : f32[64, 1, 28, 28]  = placeholder[x]",
    "%conv1        : f32[64, 10, 24, 24] = call[self.conv1](%x)",
    "%max_pool2d_1 : f32[64, 20, 4, 4]   = call[max_pool2d](%conv2_drop, 2)",
    "%view         : f32[64, 320]        = call[view](%relu_1, -1, 320)",
    "%log_softmax  : f32[64, 10]         = call[log_softmax](%fc2, dim=1)",
    "return %log_softmax",
]


def test_graph_prints_shapes(tmp_path):
    result = fxkit("graph", "lenet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert lines[0] == "graph(x):"
    for expected in LENET_LINES:
        assert expected in lines, f"{expected!r} missing from:\n{result.stdout}"
    assert "\x1b[" not in result.stdout


def test_graph_matches_the_python_api(tmp_path):
    from fxkit import models, symbolic_trace
    from fxkit.transforms import infer_shapes

    model, _ = models.get("mlp")
    gm = infer_shapes(symbolic_trace(model), ("N", 784))
    result = fxkit("graph", "mlp", "--input", "N,784", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == str(gm.graph) + "\n"
    assert "f32[N, 10]" in result.stdout


def test_graph_code(tmp_path):
    result = fxkit("graph", "mlp", "--code", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("class MLP(fxkit.nn.Module):")
    assert "    def forward(self, x):" in out
    assert "head = self.head(relu_1)  # f32[64, 10]" in out


def test_graph_table(tmp_path):
    result = fxkit("graph", "lenet", "--table", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    assert all(column in rows[1] for column in ("opcode", "name", "target", "args", "kwargs", "type"))
    conv1 = next(row for row in rows if " conv1 " in row)
    assert "call" in conv1 and "self.conv1" in conv1 and "f32[64, 10, 24, 24]" in conv1


def test_graph_fuse(tmp_path):
    result = fxkit("graph", "lstm_cell", "--fuse", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "= call[fused_0](%getitem, %getitem_1, %getitem_2, %getitem_3, %cx)" in result.stdout
    assert "with fused_0 = graph(getitem, getitem_1, getitem_2, getitem_3, cx):" in result.stdout


def test_user_model_by_module_and_by_file(tmp_path):
    write_models(tmp_path)
    by_module = fxkit("graph", "my_models:Net", "--input", "2,16", cwd=tmp_path)
    assert by_module.returncode == 0, by_module.stderr
    assert "%fc   : f32[2, 4]  = call[self.fc](%x)" in by_module.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_file = fxkit("graph", "../my_models.py:build", cwd=elsewhere)  # the factory gives (3, 8)
    assert by_file.returncode == 0, by_file.stderr
    assert "%x    : f32[3, 8] = placeholder[x]" in by_file.stdout


def test_input_dtypes(tmp_path):
    write_models(tmp_path)
    result = fxkit("graph", "my_models:Lookup", "--input", "5:int64", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "%ids       : i64[5]    = placeholder[ids]" in result.stdout
    assert "%embedding : f32[5, 4] = call[self.embedding](%ids)" in result.stdout
    result = fxkit("graph", "my_models:Lookup", "--input", "5", "--dtype", "int32", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "i32[5]" in result.stdout


def test_without_shapes_prints_the_plain_graph(tmp_path):
    write_models(tmp_path)
    result = fxkit("graph", "my_models:Net", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "%fc   = call[self.fc](%x)" in result.stdout
