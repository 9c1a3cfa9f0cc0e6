"""`RichArgumentParser`: argparse with coloured help and usage errors shown as one panel.

argparse does the parsing and lays out the help text; this class only colours
that text on a terminal (usage, section titles, options, metavars, example
command lines) and turns a usage error into the same red panel as every other
error, with exit status 2. rich is imported when help or an error is printed,
never for a command that parses cleanly.
"""
import argparse
import re
import sys

from fxkit.cli.output import console_for

# (regular expression, rich style) over argparse's help text
_HELP_STYLES = (
    (r"^usage:", "bold"),
    (r"^[A-Za-z][\w ]*:$", "bold yellow"),
    (r"(?<![\w-])--?[A-Za-z][\w-]*", "cyan"),
    (r"\b[A-Z][A-Z_]{2,}\b", "magenta"),
    (r"^\s+(?:fxkit|python) .*$", "green"),
)


class RichArgumentParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` printing help in colour and errors as a panel."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def print_help(self, file=None):
        _print_styled(self.format_help(), file or sys.stdout)

    def print_usage(self, file=None):
        _print_styled(self.format_usage(), file or sys.stdout)

    def error(self, message):
        """A usage mistake: the usage line, then the message as an error panel; exit status 2."""
        from fxkit.cli.errors import usage_panel

        _print_styled(self.format_usage(), sys.stderr)
        console_for(sys.stderr).print(usage_panel(message, self.prog))
        self.exit(2)


def positive_int(text):
    """An argparse ``type``: an int of at least 1 (``--repeat``, ``--stages``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number (give 1 or more)")
    return value


def non_negative_float(text):
    """An argparse ``type``: a finite float of at least 0 (``--tolerance``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number of 0 or more")
    return value


def join_dashed_values(argv, options):
    """``["--input", "-1,3"]`` -> ``["--input=-1,3"]`` for each option in ``options``.

    NOTE: argparse takes a value starting with "-" for an option (only plain
    negative numbers are exempt), so ``--input -1,1,28,28`` would fail as
    "expected one argument"; joined, the value reaches the option's own check,
    which says what is wrong with it.
    """
    out, i = [], 0
    while i < len(argv):
        if argv[i] in options and i + 1 < len(argv) and re.match(r"-[\d.]", argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _print_styled(text, file):
    from rich.text import Text  # rich loads slowly; only help and errors need it

    styled = Text(text)
    for pattern, style in _HELP_STYLES:
        styled.highlight_regex(re.compile(pattern, re.MULTILINE), style)
    console_for(file).print(styled, soft_wrap=True, end="")
