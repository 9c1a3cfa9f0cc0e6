"""The consoles the ``fxkit`` command prints to: results on stdout, progress and errors on stderr.

On a terminal rich uses the terminal's width and colours. Piped into a file
or another program, tables get a fixed generous width (a cost table of seven
columns squeezed into 80 would wrap every row) and no colour codes; the
``COLUMNS`` environment variable still wins when set.
"""
import os

PIPED_WIDTH = 160
"""Columns of output when stdout/stderr is not a terminal and COLUMNS is not set."""


def console_for(file):
    """A rich ``Console`` writing to ``file`` (``sys.stdout`` or ``sys.stderr``)."""
    from rich.console import Console  # rich loads slowly; imported when output starts

    interactive = hasattr(file, "isatty") and file.isatty()
    width = None if interactive or os.environ.get("COLUMNS") else PIPED_WIDTH
    return Console(file=file, width=width, highlight=False)
