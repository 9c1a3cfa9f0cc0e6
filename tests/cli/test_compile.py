"""``fxkit compile``: compile, check against eager, time both."""
import pytest

from tests.cli.run import assert_error_panel, fxkit

pytestmark = pytest.mark.slow


def test_compile_checks_against_eager(tmp_path):
    result = fxkit("compile", "mlp", "--code", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "compiled mlp with the numpy backend" in out
    assert "compiled outputs match eager" in out
    assert "def forward(" in out


def test_bench_prints_both_timings(tmp_path):
    result = fxkit("compile", "mlp", "--bench", "--repeat", "3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    eager = next(row for row in rows if row.startswith("│ eager"))
    compiled = next(row for row in rows if row.startswith("│ compiled (numpy)"))
    assert eager.count(" ms") == 2 and eager.rstrip(" │").endswith("3")
    assert compiled.count(" ms") == 2
    assert "speed-up (eager / compiled median)" in result.stdout


def test_numba_backend(tmp_path):
    pytest.importorskip("numba")
    result = fxkit("compile", "lstm_cell", "--backend", "numba", "--bench", "--repeat", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "with the numba backend" in result.stdout and "compiled outputs match eager" in result.stdout
    assert "│ compiled (numba)" in result.stdout


def test_unknown_backend(tmp_path):
    result = fxkit("compile", "mlp", "--backend", "tpu", cwd=tmp_path)
    assert_error_panel(result, "LoweringError", "no backend named 'tpu'", "numpy")


def test_onnxruntime_backend(tmp_path):
    pytest.importorskip("onnxruntime")
    result = fxkit("compile", "lenet", "--backend", "onnxruntime", "--threads", "1", "--bench", "--repeat", "2",
                   cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "with the onnxruntime backend" in result.stdout and "compiled outputs match eager" in result.stdout
    assert "│ compiled (onnxruntime)" in result.stdout
