"""`DotGraph`: Graphviz DOT source built through a structure, never by pasting strings.

Every identifier and attribute value goes through `quote`, so a node name, an
op name or a label holding quotes, backslashes or newlines cannot break the
file (or inject statements into it). Clusters nest with ``with``, like
`CodeBlock`'s indentation, so the braces always balance. Writing DOT needs no
dependency; turning it into a picture needs Graphviz's ``dot`` program
(`fxkit.graph.draw`).

Example:
    >>> dot = DotGraph("lenet", rankdir="TB")
    >>> with dot.cluster("stage 0", color="gray"):
    ...     dot.node("conv1", label="conv1\\nConv2d", fillcolor="#cfe2ff")
    >>> dot.node("relu", label="relu")
    >>> dot.edge("conv1", "relu", label="f32[64, 10, 24, 24]")
    >>> print(dot.source())
    digraph "lenet" {
        rankdir="TB";
        subgraph "cluster_0" {
            label="stage 0";
    ...
"""
import contextlib

from fxkit.codegen.block import CodeBlock


def quote(value):
    """``value`` as a DOT double-quoted string: backslashes, quotes and newlines escaped.

    A newline becomes DOT's ``\\n`` (a centred line break in a label).
    """
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\\n") + '"'


def _attributes(attrs):
    """``[a="1", b="x"]`` from keyword attributes (None values left out)."""
    parts = [f"{name}={quote(value)}" for name, value in attrs.items() if value is not None]
    return f" [{', '.join(parts)}]" if parts else ""


class DotGraph:
    """A directed graph in the DOT language.

    Args:
        name: the graph's name (quoted; any text).
        node_defaults: attributes every node starts with (``shape``, ``style``, ``fontname``...).
        edge_defaults: attributes every edge starts with.
        **attrs: graph attributes (``rankdir="LR"``, ``label=...``).
    """

    def __init__(self, name="G", node_defaults=None, edge_defaults=None, **attrs):
        self.name = name
        self._body = CodeBlock()
        self._clusters = 0
        for key, value in attrs.items():
            self._body.line(f"{key}={quote(value)};")
        if node_defaults:
            self._body.line(f"node{_attributes(node_defaults)};")
        if edge_defaults:
            self._body.line(f"edge{_attributes(edge_defaults)};")

    def node(self, node_id, **attrs):
        """Declare node ``node_id`` (any text) with attributes (``label``, ``fillcolor``, ``tooltip``...)."""
        self._body.line(f"{quote(node_id)}{_attributes(attrs)};")

    def edge(self, tail, head, **attrs):
        """An edge from node ``tail`` to node ``head``."""
        self._body.line(f"{quote(tail)} -> {quote(head)}{_attributes(attrs)};")

    @contextlib.contextmanager
    def cluster(self, label, **attrs):
        """``with dot.cluster("fused_0"):`` — nodes declared inside are drawn in one labelled box.

        Clusters nest; each gets a fresh ``cluster_<n>`` id (Graphviz boxes only
        subgraphs whose id starts with ``cluster``).
        """
        name = f"cluster_{self._clusters}"
        self._clusters += 1
        with self._body.indent(f"subgraph {quote(name)} {{"):
            self._body.line(f"label={quote(label)};")
            for key, value in attrs.items():
                if value is not None:
                    self._body.line(f"{key}={quote(value)};")
            yield self
        self._body.line("}")

    def source(self):
        """The DOT text."""
        out = CodeBlock()
        out.line(f"digraph {quote(self.name)} {{")
        with out.indent():
            out.extend(self._body)
        out.line("}")
        return str(out)
