"""``fxkit``: the console script's entry point (``[project.scripts] fxkit = "fxkit.cli.main:main"``).

Every subcommand takes the same model arguments (MODEL, ``--input``,
``--dtype``, ``--traceback``) from one parent parser and adds its own; each is
a module of `fxkit.cli.commands` with ``NAME``, ``HELP``, ``DESCRIPTION``,
``EXAMPLES``, ``configure(parser)`` and ``run(args, out, err)``. Errors are
reported by `fxkit.cli.errors` as one panel (exit status 2 for fxkit's
errors); Ctrl-C exits with 130 without a traceback.
"""
import argparse
import sys

from fxkit.cli.commands import COMMANDS, launch
from fxkit.cli.output import console_for
from fxkit.cli.parser import RichArgumentParser

DESCRIPTION = """\
Inspect, measure, draw, split and compile fxkit models from the shell.

MODEL is a zoo name (lenet, mlp, resnet18, resnet50, ...), package.module:attr
or path/to/file.py:attr, where attr is an fxkit.nn.Module, a Module class or a
function building one (called without arguments)."""

EPILOG = """\
examples:
  fxkit summary resnet50 --input 1,3,224,224
  fxkit graph lenet --table
  fxkit draw lstm_cell --fuse -o lstm.svg
  fxkit split resnet50 --stages 4
  fxkit compile mlp --backend numba --bench
  fxkit launch -n 4 train.py

`fxkit COMMAND --help` describes a command."""


def build_parser():
    """The ``fxkit`` argument parser with one subparser per command."""
    import fxkit

    parser = RichArgumentParser(prog="fxkit", description=DESCRIPTION, epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"fxkit {fxkit.__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="on an error, print Python's full traceback before the error panel")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    common = _model_arguments()
    for command in COMMANDS:
        sub = commands.add_parser(command.NAME, parents=[common], help=command.HELP,
                                  description=command.DESCRIPTION, epilog=command.EXAMPLES)
        command.configure(sub)
        sub.set_defaults(run=command.run)
    # launch takes a script, not a model: no common model arguments.
    sub = commands.add_parser(launch.NAME, help=launch.HELP, description=launch.DESCRIPTION, epilog=launch.EXAMPLES)
    launch.configure(sub)
    sub.set_defaults(run=launch.run)
    return parser


def _model_arguments():
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("model", metavar="MODEL",
                        help="zoo name, package.module:attr or path/to/file.py:attr")
    common.add_argument("--input", "-i", metavar="SHAPE", action="append", default=[],
                        help="an input shape like 1,3,224,224, once per forward argument in order (a name like "
                             "N is a symbolic size; append :int64 for another dtype); default: the model's "
                             "example shapes")
    common.add_argument("--dtype", metavar="DTYPE",
                        help="dtype of inputs without their own (float32, float16, float64, int64, ...)")
    # SUPPRESS: an unset sub-option must not overwrite `fxkit --traceback COMMAND`.
    common.add_argument("--traceback", action="store_true", default=argparse.SUPPRESS,
                        help="on an error, print Python's full traceback before the error panel")
    return common


def main(argv=None):
    """Run the ``fxkit`` command line; the exit status.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        0 on success, 2 for a usage mistake or an fxkit error, 1 for an
        unexpected error, 130 when interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    out, err = console_for(sys.stdout), console_for(sys.stderr)
    try:
        return args.run(args, out, err) or 0
    except KeyboardInterrupt:
        err.print("[red]interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001  (every failure becomes the error panel)
        from fxkit.cli.errors import report

        return report(exc, err, show_traceback=args.traceback)
