"""fxkit.optim and fxkit.utils sit on the runtime (docs/architecture.md layers): at module level they
import only fxkit.runtime, fxkit.errors and themselves, so training works without the
graph, tracer or backends."""
import ast

import pytest

from tests.test_layers import ROOT, _module_level_imports

ALLOWED = ("fxkit.runtime", "fxkit.errors", "fxkit.optim", "fxkit.utils")


@pytest.mark.parametrize("package", ["optim", "utils"])
def test_imports_stay_on_the_runtime(package):
    bad = []
    for path in (ROOT / package).rglob("*.py"):
        for lineno, module in _module_level_imports(ast.parse(path.read_text(), filename=str(path))):
            if module.split(".")[0] == "fxkit" and not module.startswith(ALLOWED):
                bad.append(f"{path.relative_to(ROOT.parent)}:{lineno} imports {module}")
    assert not bad, "imports above the runtime:\n" + "\n".join(bad)
