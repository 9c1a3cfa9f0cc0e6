"""No runnable script is named like a module it could hide.

``python benchmarks/x.py`` puts ``benchmarks/`` first on ``sys.path``, so a script
named like a standard-library or installed module replaces that module for
everything the run imports: ``benchmarks/kernels.py`` made transformers' own
``import kernels`` (the hub-kernels package it depends on) fail inside
``benchmarks/transformer_models.py``.
"""
import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for folder in ("benchmarks", "recipes") for p in (ROOT / folder).glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_script_hides_no_module(script):
    name = script.stem
    assert name not in sys.stdlib_module_names, (
        f"{script.parent.name}/{script.name} hides the standard library's {name!r} when run; rename the script")
    spec = importlib.util.find_spec(name)
    assert spec is None or pathlib.Path(spec.origin or "").parent == script.parent, (
        f"{script.parent.name}/{script.name} hides the installed module {name!r} ({spec.origin}) when run; "
        f"rename the script")
