"""Mistakes on the command line and hostile model files: a user-error panel and a non-zero
status, never the "bug in fxkit" panel, never a silent exit, never a clobbered module."""
import random
import sys

import numpy as np
import pytest

import fxkit
from fxkit.cli.model_spec import input_specs, load_model, parse_input
from fxkit.errors import ModelSpecError, ShapeError
from tests.cli.run import assert_error_panel, fxkit as run_fxkit

MODEL_FILE = '''\
from fxkit import nn


def build():
    return nn.Sequential(nn.Linear(8, 4), nn.ReLU())
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    return tmp_path


@pytest.mark.parametrize("stem", ["fxkit", "random", "numpy"])
def test_a_model_file_named_like_a_module_replaces_nothing(user_dir, stem):
    (user_dir / f"{stem}.py").write_text(MODEL_FILE)
    before = sys.modules[stem]
    loaded = load_model(f"{stem}.py:build")
    assert sys.modules[stem] is before
    assert type(loaded.model).__name__ == "Sequential"
    assert "random" not in sys.modules or sys.modules["random"] is random
    # numpy reaches the standard library's random (secrets, SystemRandom), not the user's file
    assert np.random.default_rng().integers(10) < 10
    x = fxkit.randn(2, 8)
    np.testing.assert_allclose(loaded.model(x).numpy(), np.maximum(x.numpy() @ loaded.model[0].weight.numpy().T
                                                                   + loaded.model[0].bias.numpy(), 0), rtol=1e-5)


@pytest.mark.parametrize("where, text", [
    ("module", "import sys\nsys.exit(0)\n"),
    ("factory", "import sys\n\ndef build():\n    sys.exit(0)\n"),
])
def test_sys_exit_in_a_model_file_is_an_error(user_dir, where, text):
    (user_dir / "exits.py").write_text(text)
    with pytest.raises(ModelSpecError, match=r"called sys.exit\(0\) instead of defining a model\n  hint: guard the "
                                             r"script part of the file with `if __name__ == \"__main__\":`"):
        load_model("exits.py:build")


def test_a_file_without_attr_says_to_name_one(user_dir):
    (user_dir / "net.py").write_text(MODEL_FILE)
    with pytest.raises(ModelSpecError, match=r"'net.py' names a file but not what in it to build\n  hint: write "
                                             r"net.py:ATTR"):
        load_model("net.py")


@pytest.mark.parametrize("text, message", [
    ("²,784", r"'²' is not a dimension"),
    ("-1,1,28,28", r"'-1' is a negative size"),
    ("1000000000000,784", r"has 784,000,000,000,000 elements, more than the 2,147,483,648 fxkit's command line "
                          r"takes for one input"),
])
def test_bad_input_shapes_are_shape_errors(text, message):
    with pytest.raises(ShapeError, match=message):
        parse_input(text)


def test_dtype_casts_parameters_as_well_as_inputs(user_dir):
    (user_dir / "net.py").write_text(MODEL_FILE)
    loaded = load_model("net.py:build", "float16")
    assert {p.dtype for p in loaded.model.parameters()} == {fxkit.float16}
    assert input_specs(loaded, ["2,8"], "float16") == [((2, 8), fxkit.float16)]
    assert {p.dtype for p in load_model("net.py:build", "int64").model.parameters()} == {fxkit.float32}


@pytest.mark.slow
def test_command_line_mistakes_are_user_errors(tmp_path):
    """Each mistake once through the real command: status 2 and a panel without the bug hint."""
    result = run_fxkit("draw", "mlp", "-o", tmp_path / "missing" / "mlp.svg", cwd=tmp_path)
    assert_error_panel(result, "FileNotFoundError", "No such file or directory",
                       f"the folder {tmp_path / 'missing'} does not exist")
    assert "bug in fxkit" not in result.stderr
    result = run_fxkit("summary", "mlp", "--input", "-1,1,28,28", cwd=tmp_path)
    assert_error_panel(result, "ShapeError", "'-1' is a negative size")
    result = run_fxkit("compile", "mlp", "--bench", "--repeat", "-5", cwd=tmp_path)
    assert result.returncode == 2 and "-5 is not a positive number (give 1 or more)" in result.stderr
    assert "bug in fxkit" not in result.stderr
    (tmp_path / "random.py").write_text("import sys\nsys.exit(0)\n")
    result = run_fxkit("summary", "random.py:build", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "called sys.exit(0)")
