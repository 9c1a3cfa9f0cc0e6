"""The ``fxkit`` command: graphs, cost tables, pictures, pipeline splits and compilation from a shell.

``fxkit <command> MODEL`` acts on a zoo model (``resnet50``) or on a model of
your own named ``package.module:factory`` or ``path/to/file.py:Class``;
``fxkit --help`` lists the commands. Start-up stays fast: argparse parses
first, and each command imports what it needs (rich, the passes, a backend)
only when it runs. `main` is the console script's entry point.
"""
from fxkit.cli.main import main

__all__ = ["main"]
