"""Every code block of the documentation runs: ``docs/**/*.md`` and ``README.md``.

The rules, which docs/index.md repeats for writers:

* ```` ```python ```` blocks of one file run in order in one namespace (a
  fresh module), from a temporary directory, like a reader pasting them into
  one session. Tracebacks point at the Markdown file's lines.
* ```` ```python no-run ```` blocks show a failure on purpose. They run too,
  and must raise an fxkit error: the failure they show is the real one.
* an ```` ```output ```` block right after a python block is what that block
  prints; it must match exactly (trailing spaces aside).
* ```` ```bash ```` blocks in docs/ hold ``fxkit ...`` or ``python ...``
  command lines; each runs in a shell (the test interpreter's ``fxkit`` and
  ``python`` first on PATH) and must succeed, or, under ```` ```bash no-run
  ````, fail with exit status 2 and an error panel.
* other fences (```` ```text ````, ```` ```json ````) are illustrations, not code.
"""
import contextlib
import io
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

from fxkit.errors import FxkitError

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FILES = sorted(DOCS.rglob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```(\S*)\s*(.*)$")
RUNS = ("python", "bash")


class Block:
    """One fenced block: its language, options (``no-run``), text and first line number."""

    def __init__(self, lang, options, lines, line):
        self.lang, self.options, self.text, self.line = lang, options.split(), "\n".join(lines), line

    @property
    def no_run(self):
        return "no-run" in self.options


def blocks_of(path):
    """The fenced blocks of a Markdown file, in order."""
    found, current, start = [], None, 0
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = FENCE.match(line)
        if current is None:
            if match:
                current, start = (match.group(1), match.group(2), []), number + 1
        elif line.strip() == "```":
            found.append(Block(current[0], current[1], current[2], start))
            current = None
        else:
            current[2].append(line)
    assert current is None, f"{path}: a fence opened at line {start - 1} is never closed"
    return found


def _lines(text):
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def run_python(path, block, namespace):
    """Run one python block in ``namespace``; what it printed."""
    code = compile("\n" * (block.line - 1) + block.text, str(path), "exec")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        if not block.no_run:
            exec(code, namespace)
        else:
            with pytest.raises(FxkitError):
                exec(code, namespace)
    return printed.getvalue()


def run_bash(path, block, cwd):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               COLUMNS="120")
    for offset, command in enumerate(block.text.splitlines()):
        command = command.strip()
        if not command or command.startswith("#"):
            continue
        where = f"{path.relative_to(ROOT)}:{block.line + offset}"
        assert command.split()[0] in ("fxkit", "python"), \
            f"{where}: docs bash blocks hold fxkit or python commands only, got {command!r}"
        result = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        if block.no_run:
            assert result.returncode == 2 and "╭" in result.stderr, \
                f"{where}: `{command}` should fail with an error panel (exit 2), got {result.returncode}:\n" \
                f"{result.stdout}\n{result.stderr}"
        else:
            assert result.returncode == 0, f"{where}: `{command}` failed:\n{result.stdout}\n{result.stderr}"


def test_docs_exist():
    names = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    for page in ("index.md", "tutorial.md", "writing_passes.md", "tracing_limits.md", "ir_reference.md",
                 "cli.md"):
        assert page in names, f"docs/{page} is missing"
    assert len([n for n in names if n.startswith("transforms/")]) >= 10
    assert "docs/index.md" in (ROOT / "README.md").read_text(), "the README links docs/index.md"


def test_blocks_are_recognised():
    """Fences this harness would silently skip are caught (a typo like ```pyhton)."""
    known = set(RUNS) | {"output", "text", "json", ""}
    for path in FILES:
        for block in blocks_of(path):
            assert block.lang in known, f"{path.relative_to(ROOT)}:{block.line - 1}: unknown fence {block.lang!r}"
            assert set(block.options) <= {"no-run"}, f"{path.relative_to(ROOT)}:{block.line - 1}: {block.options}"


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_code_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("fxkit_docs_" + re.sub(r"\W", "_", path.stem))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    printed, ran = None, 0
    for block in blocks_of(path):
        if block.lang == "python":
            printed = run_python(path, block, namespace)
            ran += 1
            continue
        if block.lang == "output":
            assert printed is not None, f"{path}:{block.line - 1}: an output block must follow a python block"
            assert _lines(printed) == _lines(block.text), \
                f"{path}:{block.line}: the block above printed\n{printed}\nbut the docs show\n{block.text}"
        elif block.lang == "bash" and path.is_relative_to(DOCS):
            run_bash(path, block, tmp_path)
            ran += 1
        printed = None
    assert ran or path.name == "README.md", f"{path} has no code block"
