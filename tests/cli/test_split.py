"""``fxkit split``: the stage table of a balanced pipeline split."""
import re

import pytest

from tests.cli.run import assert_error_panel, fxkit

pytestmark = pytest.mark.slow


def test_resnet50_four_stages(tmp_path):
    result = fxkit("split", "resnet50", "--stages", "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "pipeline: 4 stages" in out
    rows = [line for line in out.splitlines() if re.match(r"│ [0-9] ", line)]
    assert [row.split("│")[1].strip() for row in rows] == ["0", "1", "2", "3"]
    assert "conv1 →" in rows[0] and "→ fc" in rows[3] and "(output)" in rows[3]
    ratio = float(re.search(r"largest stage / mean flops = ([0-9.]+)", out).group(1))
    assert 1.0 <= ratio < 1.2


def test_balance_by_params(tmp_path):
    result = fxkit("split", "resnet18", "--stages", "2", "--balance", "params", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "split by params" in result.stdout


def test_symbolic_sizes_are_refused(tmp_path):
    result = fxkit("split", "resnet18", "--stages", "2", "--input", "N,3,64,64", cwd=tmp_path)
    assert_error_panel(result, "ShapeError", "needs concrete sizes", "N,3,64,64")
