"""Errors of the ``fxkit`` command as one readable panel instead of a Python traceback.

fxkit's messages follow one layout (STYLE.md): the message, then indented
``at file:line in function: source``, ``node: ...`` and ``hint: ...`` lines.
The panel shows that text with each part styled; when the message does not
say where it happened, the innermost frame of the user's own code in the
traceback (not fxkit's, not the standard library's, not an installed
package's) is added as the ``at`` line, so a mistake in a model file points
at its line. Exit status: 2 for fxkit's errors (a `TraceError`, a bad model
spec, a bad shape...) and for files the user named that cannot be read or
written (``draw -o`` into a missing folder), 1 for anything else, which is a bug when it is not in
the user's code. ``--traceback`` prints the full traceback before the panel.
"""
import os
import sysconfig
import traceback

import fxkit
from fxkit.errors import FxkitError

_PACKAGE = os.path.dirname(os.path.abspath(fxkit.__file__)) + os.sep
_LIBRARY = tuple({os.path.abspath(p) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
                  if (p := sysconfig.get_paths().get(key))})
_LINE_STYLES = (("  at ", "cyan"), ("  in ", "cyan"), ("  node: ", "magenta"), ("  hint: ", "green"))


def report(exc, console, show_traceback=False):
    """Print ``exc`` as an error panel on ``console``; the process exit status to use.

    Args:
        exc: the exception a command raised.
        console: the stderr console.
        show_traceback: print Python's full traceback first (``--traceback``).

    Returns:
        2 for an `FxkitError`, 1 for any other exception.
    """
    if show_traceback:
        console.print("".join(traceback.format_exception(exc)), markup=False, highlight=False, soft_wrap=True)
    console.print(error_panel(exc, show_traceback))
    return 2 if _expected(exc) else 1


def _expected(exc):
    """An fxkit error, or a file the user named that cannot be read or written (a missing
    folder, no permission): mistakes to fix on the command line, not bugs."""
    return isinstance(exc, FxkitError) or (isinstance(exc, OSError) and exc.filename is not None)


def error_panel(exc, traceback_shown=False):
    """The rich ``Panel`` showing ``exc``: its message, where in the user's code, and the hint."""
    from rich.panel import Panel  # rich loads slowly; imported only when something failed
    from rich.text import Text

    expected = _expected(exc)
    lines = (str(exc) or type(exc).__name__).rstrip("\n").split("\n")
    if isinstance(exc, OSError) and exc.filename is not None:
        folder = os.path.dirname(os.path.abspath(exc.filename))
        lines = [f"cannot use {exc.filename}: {exc.strerror or exc}",
                 f"  hint: check the path: {'the folder ' + folder + ' does not exist' if not os.path.isdir(folder) else 'it must be readable (inputs) or its folder writable (outputs)'}"]
    if not any(line.startswith("  at ") for line in lines):
        where = user_location(exc)
        if where is not None:
            lines.insert(1, f"  at {where}")
    if not expected:
        lines.append("  hint: if the error is not in your own code, it is a bug in fxkit: please report it "
                     "with the output of --traceback")
    body = Text()
    for i, line in enumerate(lines):
        style = "bold" if i == 0 else next((s for prefix, s in _LINE_STYLES if line.startswith(prefix)), "")
        body.append(line + ("\n" if i < len(lines) - 1 else ""), style=style)
    title = type(exc).__name__ if expected else f"{type(exc).__name__} (unexpected)"
    return Panel(body, title=f"[bold red]{title}", title_align="left", border_style="red", expand=False,
                 subtitle=None if traceback_shown else "[dim]--traceback shows the full traceback",
                 subtitle_align="right")


def usage_panel(message, prog):
    """The panel of a command-line usage mistake (argparse's message)."""
    from rich.panel import Panel
    from rich.text import Text

    body = Text(message, style="bold")
    body.append(f"\n  hint: `{prog} --help` lists the arguments", style="green")
    return Panel(body, title="[bold red]usage error", title_align="left", border_style="red", expand=False)


def user_location(exc):
    """``file:line in function: source`` of the innermost user frame of ``exc`` or its causes; None if none."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_user_file(f.filename)]
        if frames:
            frame = frames[-1]
            where = f"{frame.filename}:{frame.lineno} in {frame.name}"
            return f"{where}: {frame.line}" if frame.line else where
        exc = exc.__cause__ or exc.__context__
    return None


def _is_user_file(filename):
    if filename.startswith("<"):
        return False  # generated code, frozen modules, the interactive prompt
    path = os.path.abspath(filename)
    return not path.startswith(_PACKAGE) and not path.startswith(_LIBRARY)
