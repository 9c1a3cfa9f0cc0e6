"""The layer rule of DESIGN.md: a package imports from its own layer or below.

Module-level imports only; an import inside a function that must go up carries
a ``# NOTE:`` saying why and is allowed.
"""
import ast
import pathlib

import pytest

ORDER = ["runtime", "codegen", "graph", "tracer", "transforms", "distributed", "backends", "interop", "models", "cli"]
ROOT = pathlib.Path(__file__).resolve().parents[1] / "fxkit"


def _layer_of(module):
    parts = module.split(".")
    if parts[0] != "fxkit" or len(parts) < 2:
        return None
    name = parts[1]
    if name == "nn":
        return "runtime"
    if name in ("cli",):
        return "cli"
    return name if name in ORDER else None


def _module_level_imports(tree):
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


@pytest.mark.parametrize("layer", ORDER[:-2])
def test_no_upward_imports(layer):
    folder = ROOT / layer
    if not folder.exists():
        pytest.skip(f"fxkit/{layer} does not exist yet")
    allowed = set(ORDER[: ORDER.index(layer) + 1])
    bad = []
    for path in folder.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for lineno, module in _module_level_imports(tree):
            target = _layer_of(module)
            if target is not None and target not in allowed:
                bad.append(f"{path.relative_to(ROOT.parent)}:{lineno} imports {module}")
    assert not bad, "upward imports (DESIGN.md layers):\n" + "\n".join(bad)
