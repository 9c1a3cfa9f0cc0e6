"""Coloured and notebook forms of a printed graph (the terminal, ``fxkit graph`` and Jupyter).

`highlighted` colours ``str(graph)`` (names, opcodes, types, ``return``)
without changing a character of it, so what a terminal shows is what tests
compare. Jupyter calls ``_repr_html_`` on a `Graph` (the coloured text as
HTML) and on a `GraphModule` (its picture, when Graphviz's ``dot`` is
installed, above the coloured text); ``GraphModule._repr_svg_`` is the
picture alone. rich is imported only when one of these is asked for.

Example:
    >>> from rich.console import Console
    >>> Console().print(highlighted(gm.graph), soft_wrap=True)
"""
import html
import io

from fxkit.graph.draw import to_svg

# (regular expression, rich style) applied in order over the printed text
_STYLES = (
    (r"^graph\(|^with \w+ = graph\(", "bold magenta"),
    (r"%[A-Za-z_]\w*", "cyan"),
    (r"(?<= = )placeholder(?=\[)", "bold green"),
    (r"(?<= = )get_attr(?=\[)", "bold yellow"),
    (r"(?<= = )call(?=\[)", "bold blue"),
    (r"^\s+return\b", "bold red"),
    (r"(?<=: )\(?(?:bf16|[fiu]\d+|b8)\[[^=]*?(?=\s+=)", "green"),
)
_PRE = ('<pre style="font-family: Menlo, Consolas, \'DejaVu Sans Mono\', monospace; font-size: 12px; '
        'line-height: 1.35; white-space: pre; overflow-x: auto">{code}</pre>')


def highlighted(graph):
    """``str(graph)`` as a rich ``Text`` with styles on names, opcodes, types and ``return``."""
    import re

    from rich.text import Text  # rich loads slowly; only coloured output needs it

    text = Text(str(graph))
    for pattern, style in _STYLES:
        text.highlight_regex(re.compile(pattern, re.MULTILINE), style)
    return text


def graph_html(graph):
    """The coloured printed graph as an HTML fragment with inline styles (a ``<pre>`` block)."""
    from rich.console import Console

    console = Console(record=True, width=10_000, file=io.StringIO(), color_system="truecolor", force_terminal=True)
    console.print(highlighted(graph), soft_wrap=True)
    return console.export_html(inline_styles=True, code_format=_PRE)


def module_html(gm):
    """A `GraphModule` for Jupyter: its picture when ``dot`` is installed, then the printed graph."""
    title = f"<b>{html.escape(type(gm).__name__)}</b> (fxkit GraphModule)"
    svg = to_svg(gm)
    text = graph_html(gm.graph)
    if svg is None:
        return f"<div>{title}{text}</div>"
    return (f"<div>{title}<div>{_inline(svg)}</div>"
            f"<details><summary>printed graph</summary>{text}</details></div>")


def _inline(svg):
    """An SVG document without its XML prolog and doctype, to sit inside HTML."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg

