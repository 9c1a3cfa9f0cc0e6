"""The ``fxkit`` subcommands, one module each.

A command module defines ``NAME``, ``HELP`` (one line for ``fxkit --help``),
``DESCRIPTION`` and ``EXAMPLES`` (for ``fxkit NAME --help``),
``configure(parser)`` adding its own options, and ``run(args, out, err)``
printing results on ``out`` and progress on ``err`` (rich consoles) and
returning the exit status. Modules import fxkit's heavier parts inside
``run``, so ``fxkit --help`` stays quick.
"""
from fxkit.cli.commands import compile_cmd, draw, graph, launch, split, summary

COMMANDS = (graph, summary, draw, split, compile_cmd)

__all__ = ["COMMANDS", "launch"]
