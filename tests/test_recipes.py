"""Every recipe runs as a user would run it: ``python recipes/<name>.py`` exits 0."""
import pathlib
import subprocess
import sys

import pytest

RECIPES = sorted((pathlib.Path(__file__).resolve().parents[1] / "recipes").glob("*.py"))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_runs(recipe, tmp_path):
    result = subprocess.run([sys.executable, str(recipe)], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, f"{recipe.name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout.strip(), f"{recipe.name} printed nothing"
