"""``fxkit --help`` and friends: the commands are listed, each command documents itself."""
import pytest

from tests.cli.run import SCRIPT, assert_error_panel, fxkit

COMMANDS = ("graph", "summary", "draw", "split", "compile")


def test_console_script_is_installed():
    assert SCRIPT.exists(), "pip install -e . creates the fxkit script from pyproject's [project.scripts]"


@pytest.mark.slow
def test_help_lists_every_command(tmp_path):
    result = fxkit("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("usage: fxkit")
    for command in COMMANDS:
        assert f"\n    {command} " in out, f"{command} missing from:\n{out}"
    assert "fxkit summary resnet50 --input 1,3,224,224" in out  # the examples
    assert "\x1b[" not in out, "no colour codes when output is not a terminal"


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_command_help(command, tmp_path):
    result = fxkit(command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: fxkit {command}")
    for option in ("MODEL", "--input", "--dtype", "--traceback", "examples:"):
        assert option in result.stdout


@pytest.mark.slow
def test_no_command_prints_help_and_fails(tmp_path):
    result = fxkit(cwd=tmp_path)
    assert result.returncode == 2
    assert "commands:" in result.stdout


@pytest.mark.slow
def test_version(tmp_path):
    from fxkit import __version__

    result = fxkit("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == f"fxkit {__version__}"


@pytest.mark.slow
def test_unknown_command_is_a_usage_error(tmp_path):
    result = fxkit("frobnicate", "lenet", cwd=tmp_path)
    assert_error_panel(result, "usage error", "invalid choice: 'frobnicate'", "fxkit --help")
    assert result.stderr.startswith("usage: fxkit")


@pytest.mark.slow
def test_missing_model_is_a_usage_error(tmp_path):
    result = fxkit("summary", cwd=tmp_path)
    assert_error_panel(result, "usage error", "required: MODEL", "fxkit summary --help")
