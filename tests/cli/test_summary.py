"""``fxkit summary``: the cost table with per-layer rows and totals."""
import pytest

from tests.cli.run import assert_error_panel, fxkit, write_models

pytestmark = pytest.mark.slow


def test_resnet50_summary(tmp_path):
    result = fxkit("summary", "resnet50", "--input", "1,3,224,224", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for column in ("node", "target", "shape", "FLOPs", "params", "bytes read", "bytes written"):
        assert column in out
    # The published ResNet-50 figures: 4.1 GMACs, 25.56 M parameters.
    assert "8.22 GFLOPs = 4.11 GMACs, 25.56 M parameters (102.23 MB)" in out
    fc = next(line for line in out.splitlines() if "self.fc" in line)
    assert "f32[1, 1000]" in fc and "4.10 M" in fc and "2.05 M" in fc  # 2*2048*1000 FLOPs, 2048*1000+1000 params
    total = next(line for line in out.splitlines() if line.startswith("│ total"))
    assert "8.22 G" in total and "25.56 M" in total


def test_symbolic_batch(tmp_path):
    result = fxkit("summary", "mlp", "--input", "N,784", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # Per sample: 2 * (784*256 + 256*128 + 128*10) for the linear layers, 256 + 128 for the relus.
    assert f"N*{2 * (784 * 256 + 256 * 128 + 128 * 10) + 256 + 128} FLOPs" in result.stdout


def test_model_without_shapes_needs_input(tmp_path):
    write_models(tmp_path)
    result = fxkit("summary", "my_models:Net", cwd=tmp_path)
    assert_error_panel(result, "ShapeError", "has no example input shapes", "--input")


def test_input_dtype_that_does_not_fit(tmp_path):
    # an input's own dtype casts nothing else (--dtype float64 would cast the model's parameters too)
    result = fxkit("summary", "mlp", "--input", "4,784:float64", cwd=tmp_path)
    assert_error_panel(result, "DTypeError", "linear: expected all inputs to have the same dtype",
                       "node: %layers_0 = call[self.layers.0](%flatten)")


def test_partitions_of_a_delegate_are_rows(tmp_path):
    pytest.importorskip("onnxruntime")
    result = fxkit("summary", "mlp", "--partition", "onnxruntime", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    row = next(r for r in result.stdout.splitlines() if r.startswith("│ supported_0"))
    assert "self.supported_0" in row and "f32[64, 10]" in row and "235.15 K" in row
