"""Errors as one panel with the user's source line, exit status 2; ``--traceback`` for the full one."""
import pytest

from tests.cli.run import assert_error_panel, fxkit, write_models

pytestmark = pytest.mark.slow


def test_trace_error_points_at_the_users_line(tmp_path):
    models = write_models(tmp_path)
    line = models.read_text().splitlines().index("        if x.sum() > 0:") + 1
    result = fxkit("graph", "my_models:Branchy", cwd=tmp_path)
    assert_error_panel(result, "TraceError", "truth value of traced value",
                       f"my_models.py:{line} in forward: if x.sum() > 0:", "concrete_args", "--traceback")


def test_traceback_option_shows_the_full_traceback(tmp_path):
    write_models(tmp_path)
    for args in (("graph", "my_models:Branchy", "--traceback"), ("--traceback", "graph", "my_models:Branchy")):
        result = fxkit(*args, cwd=tmp_path)
        assert result.returncode == 2
        assert "Traceback (most recent call last)" in result.stderr
        assert "fxkit.errors.TraceError: symbolic tracing" in result.stderr
        assert "╭─ TraceError" in result.stderr


def test_zoo_typo(tmp_path):
    result = fxkit("summary", "resnet5", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "no zoo model named 'resnet5'", "did you mean 'resnet50'?")


def test_dotted_name_without_colon(tmp_path):
    result = fxkit("graph", "my_models.Net", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "separate them with a colon: my_models:Net")


def test_missing_module_and_attribute(tmp_path):
    write_models(tmp_path)
    result = fxkit("graph", "not_there:Net", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "no module named 'not_there'")
    result = fxkit("graph", "my_models:Nett", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "has no attribute 'Nett'", "did you mean 'Net'?",
                       "Branchy, Lookup, NeedsWidth, Net, broken, build")
    result = fxkit("graph", "missing.py:Net", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "there is no file 'missing.py'")


def test_constructor_needing_arguments(tmp_path):
    write_models(tmp_path)
    result = fxkit("graph", "my_models:NeedsWidth", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "NeedsWidth(width) needs arguments", "def build()")


def test_factory_error_points_at_its_line(tmp_path):
    models = write_models(tmp_path)
    line = models.read_text().splitlines().index('    return Net(width=int("sixteen"))') + 1
    result = fxkit("graph", "my_models:broken", cwd=tmp_path)
    assert_error_panel(result, "ModelSpecError", "broken() raised ValueError",
                       f"my_models.py:{line} in broken")


@pytest.mark.parametrize("shape, phrase", [("1,3,2x4", "'2x4' is not a dimension"),
                                           ("", "names no dimensions"),
                                           ("1,-3", "'-3' is a negative size")])
def test_bad_shape_text(tmp_path, shape, phrase):
    result = fxkit("summary", "resnet18", "--input", shape, cwd=tmp_path)
    assert_error_panel(result, "ShapeError", phrase, "1,3,224,224")


def test_shape_that_does_not_fit_names_the_layer(tmp_path):
    result = fxkit("summary", "resnet18", "--input", "1,4,64,64", cwd=tmp_path)
    assert_error_panel(result, "ShapeError", "expects 3 input channels", "node: %conv1 = call[self.conv1](%x)",
                       "resnet.py:")


def test_wrong_number_of_inputs(tmp_path):
    result = fxkit("summary", "lstm_cell", "--input", "4,128", cwd=tmp_path)
    assert_error_panel(result, "ShapeError", "takes 3 inputs (input, hx, cx); got 1 input shapes")


def test_unknown_dtype(tmp_path):
    result = fxkit("summary", "mlp", "--dtype", "float99", cwd=tmp_path)
    assert_error_panel(result, "DTypeError", "unknown dtype name 'float99'")
