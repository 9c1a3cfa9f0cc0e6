"""Every recipe runs as a user would run it: ``python recipes/<name>.py`` exits 0, and leaves
nothing in the temporary folder."""
import os
import pathlib
import subprocess
import sys

import pytest

RECIPES = sorted((pathlib.Path(__file__).resolve().parents[1] / "recipes").glob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_runs(recipe, tmp_path):
    temp = tmp_path / "tmp"
    temp.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run([sys.executable, str(recipe)], capture_output=True, text=True, timeout=300,
                            cwd=work, env=dict(os.environ, TMPDIR=str(temp)))
    assert result.returncode == 0, f"{recipe.name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout.strip(), f"{recipe.name} printed nothing"
    left = sorted(p.name for p in temp.iterdir() if p.name.startswith("fxkit-"))
    assert not left, f"{recipe.name} left {left} in the temporary folder"
