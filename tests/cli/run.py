"""Running the installed ``fxkit`` command as a user does, in a subprocess."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(sys.executable).parent / ("fxkit.exe" if os.name == "nt" else "fxkit")
HAS_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAS_DOT, reason="Graphviz's dot program is not installed")


def fxkit(*args, cwd, path=None, timeout=600):
    """Run ``fxkit *args`` in ``cwd``; the `subprocess.CompletedProcess` (text output).

    Args:
        path: the PATH to run with (default: the current one); a PATH without
            Graphviz simulates a machine that lacks it.
    """
    assert SCRIPT.exists(), (f"the fxkit console script is not installed at {SCRIPT}; "
                             f"reinstall the package: pip install -e .")
    env = dict(os.environ, COLUMNS="200")
    if path is not None:
        env["PATH"] = path
    return subprocess.run([str(SCRIPT), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def assert_error_panel(result, title, *phrases):
    """An error shown as one rich panel titled ``title`` on stderr, exit status 2, no traceback."""
    assert result.returncode == 2, f"exit status {result.returncode}\n{result.stdout}\n{result.stderr}"
    err = result.stderr
    assert err.count("╭") == 1 and err.count("╰") == 1, f"not one panel:\n{err}"
    assert f"╭─ {title} " in err, f"panel title is not {title}:\n{err}"
    assert "Traceback (most recent call last)" not in err
    for phrase in phrases:
        assert phrase in err, f"{phrase!r} missing from:\n{err}"


def write_models(folder):
    """A user's model file ``my_models.py`` in ``folder``; returns its path.

    It defines ``Net`` (traceable, constructor defaults), ``build`` (a factory
    returning the model and its input shapes), ``Branchy`` (control flow on a
    tensor at the line holding ``if x.sum() > 0:``), ``NeedsWidth`` (a
    constructor argument without a default), ``Lookup`` (an embedding reading
    integer ids) and ``broken`` (a factory raising).
    """
    path = pathlib.Path(folder) / "my_models.py"
    path.write_text('''\
import fxkit
from fxkit import nn


class Net(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.fc = nn.Linear(width, 4)

    def forward(self, x):
        return self.fc(x).relu() * 2.0


def build():
    return Net(width=8), [(3, 8)]


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x.relu()
        return x


class NeedsWidth(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(10, 4)

    def forward(self, ids):
        return self.embedding(ids)


def broken():
    return Net(width=int("sixteen"))
''')
    return path
