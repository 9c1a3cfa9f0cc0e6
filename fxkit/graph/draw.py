"""Pictures of graphs: DOT text without any dependency, SVG/PNG/PDF through Graphviz's ``dot``.

`to_dot` maps a graph onto `fxkit.codegen.dot.DotGraph`:

* one box per node, coloured by opcode (inputs green, attributes yellow, op
  calls blue, module calls purple, other functions grey, the output red),
  labelled with the node's name and what it calls; hovering a node in an SVG
  shows its printed line (``call[add](%x, %y)``);
* one edge per value read, labelled with the value's type (``f32[8, 64, 56,
  56]``) when a pass recorded shapes (`infer_shapes`, `ShapeProp`);
* a fused group (a ``call`` whose target holds a sub-graph, like a
  `FusedOp`) drawn as a cluster of its body's ops, wired to the values the
  group reads and the nodes reading its results (the ``getitem`` nodes
  picking results of a multi-output group are drawn as the edges they are);
* a partition of `partition_by_support` (a ``call`` of a child module with
  ``meta["partition"]``) drawn the same way, as a cluster of the child's ops;
* nodes carrying ``meta["stage"]`` (a pipeline stage number, which any pass
  may set) drawn inside one cluster per stage.

`draw` writes ``.dot``/``.gv`` text directly and renders every other suffix
(``.svg``, ``.png``, ``.pdf``, ...) with the ``dot`` program; without it, it
writes the ``.dot`` file and raises `MissingToolError` naming the package to
install. `to_svg` is what Jupyter displays.

Example:
    >>> gm = infer_shapes(fxkit.symbolic_trace(model), (1, 3, 224, 224))
    >>> fxkit.draw(gm, "model.svg")
    PosixPath('model.svg')
"""
import os
import pathlib
import shutil
import subprocess

from fxkit.codegen.dot import DotGraph
from fxkit.errors import GraphError, MissingToolError
from fxkit.graph.call_targets import called_graph
from fxkit.graph.node import Node, format_operation, format_target
from fxkit.graph.printer import format_type
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op

COLORS = {"placeholder": "#d1e7dd", "get_attr": "#fff3cd", "op": "#cfe2ff", "module": "#e2d9f3",
          "function": "#e9ecef", "output": "#f8d7da"}
"""Fill colour by kind of node: the opcode, with ``call`` split by what it calls."""
FUSED_CLUSTER = {"style": "rounded,filled", "fillcolor": "#fdf2e9", "color": "#e0a458"}
STAGE_CLUSTER = {"style": "rounded,dashed", "color": "#6c757d"}
_GETITEM = get_op("getitem")
TEXT_SUFFIXES = (".dot", ".gv")
INSTALL_HINT = ("install Graphviz, which provides it (Debian/Ubuntu: `apt-get install graphviz`; Fedora: "
                "`dnf install graphviz`; macOS: `brew install graphviz`; conda: `conda install graphviz`); "
                "no pip package provides the program")


def to_dot(module_or_graph, name=None):
    """The DOT text of a `GraphModule` or `Graph`.

    Args:
        module_or_graph: what to draw; module calls are labelled with the
            submodule's class when the graph's module is known.
        name: the picture's title; defaults to the module's class name.

    Returns:
        The DOT source, ready for ``dot -Tsvg``.
    """
    graph, gm = _graph_and_module(module_or_graph)
    title = name or (type(gm).__name__ if gm is not None else "graph")
    return _Drawing(graph, gm).build(title).source()


def dot_available():
    """Whether Graphviz's ``dot`` program is on PATH (needed for anything but ``.dot`` text)."""
    return shutil.which("dot") is not None


def render(source, fmt):
    """Run ``dot -T<fmt>`` on DOT ``source``; the picture's bytes.

    Raises:
        MissingToolError: ``dot`` is not installed.
        GraphError: ``dot`` rejected the format or the source (its message included).
    """
    exe = shutil.which("dot")
    if exe is None:
        raise MissingToolError(f"fxkit.draw: rendering {fmt} needs Graphviz's `dot` program, which is not on "
                               f"PATH; {INSTALL_HINT}")
    result = subprocess.run([exe, f"-T{fmt}"], input=source.encode(), capture_output=True)
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip()
        raise GraphError(f"fxkit.draw: `dot -T{fmt}` failed: {message}")
    return result.stdout


def to_svg(module_or_graph):
    """The SVG picture as text, or None when ``dot`` is not installed (Jupyter then shows HTML only)."""
    if not dot_available():
        return None
    return render(to_dot(module_or_graph), "svg").decode()


def draw(module_or_graph, path):
    """Draw a `GraphModule` or `Graph` to ``path``; the suffix picks the format.

    ``.dot`` and ``.gv`` get the DOT text (no dependency); any other suffix
    Graphviz knows (``.svg``, ``.png``, ``.pdf``, ``.jpg``) is rendered by the
    ``dot`` program. The command-line ``fxkit draw`` calls this function.

    Args:
        module_or_graph: what to draw (run `infer_shapes` first for shapes on edges,
            `fuse_elementwise` for fused clusters, set ``meta["stage"]`` for stages).
        path: the file to write.

    Returns:
        ``path`` as a `pathlib.Path`.

    Raises:
        MissingToolError: the suffix needs ``dot`` and it is not installed; the DOT
            text was written next to ``path`` (same name, ``.dot``) to render elsewhere.
        GraphError: ``path`` has no suffix, or ``dot`` rejected the format.

    Example:
        >>> fxkit.draw(gm, "lenet.svg")
        PosixPath('lenet.svg')
    """
    path = pathlib.Path(os.fspath(path))
    suffix = path.suffix.lower()
    if not suffix:
        raise GraphError(f"fxkit.draw: {str(path)!r} has no suffix to pick the format from; "
                         f"use .svg, .png, .pdf or .dot")
    source = to_dot(module_or_graph)
    if suffix in TEXT_SUFFIXES:
        path.write_text(source)
        return path
    if not dot_available():
        fallback = path.with_suffix(".dot")
        fallback.write_text(source)
        raise MissingToolError(f"fxkit.draw: writing {path} needs Graphviz's `dot` program, which is not on PATH; "
                               f"{INSTALL_HINT}. The graph was written as DOT text to {fallback}: render it "
                               f"with `dot -T{suffix[1:]} {fallback} -o {path}` where Graphviz is installed")
    path.write_bytes(render(source, suffix[1:]))
    return path


def _graph_and_module(module_or_graph):
    graph = getattr(module_or_graph, "graph", None)
    if graph is not None and hasattr(graph, "nodes"):
        return graph, module_or_graph
    if hasattr(module_or_graph, "nodes") and hasattr(module_or_graph, "owning_module"):
        return module_or_graph, module_or_graph.owning_module
    raise GraphError(f"fxkit.draw: expected a GraphModule or a Graph, got {type(module_or_graph).__name__}; "
                     f"trace the model first with fxkit.symbolic_trace(model)")


def _label(name, description):
    """``name`` over what the node calls, the second line left out when it says the same."""
    return name if description == name else f"{name}\n{description}"


class _Drawing:
    """One graph being drawn: where each value is drawn, then nodes by cluster, then edges."""

    def __init__(self, graph, gm):
        self.graph = graph
        self.gm = gm
        self.nodes = list(graph.nodes)
        # getitem nodes picking one result of a fused call: drawn as edges from that result.
        self.picks = {}
        for node in self.nodes:
            if (node.is_op(_GETITEM) and len(node.args) == 2 and isinstance(node.args[0], Node)
                    and self._body(node.args[0]) is not None and type(node.args[1]) is int):
                self.picks[node] = node.args[0], node.args[1]

    def _body(self, node):
        """The sub-graph drawn inside ``node``'s cluster: a fused group's body, or a partition's graph."""
        body = called_graph(node)
        if body is None and node.op == "call" and type(node.target) is str and "partition" in node.meta:
            body = getattr(self._module(node.target), "graph", None)
        return body

    # -- where a value is drawn ------------------------------------------------------------
    def source_of(self, value):
        """The DOT id of the box producing outer node ``value``."""
        if value in self.picks:
            fused, index = self.picks[value]
            results = self._body(fused).output_node().args[0]
            return self._body_source(fused, results[index] if isinstance(results, (tuple, list)) else results)
        body = self._body(value)
        if body is not None:
            results = body.output_node().args[0]
            single = results[-1] if isinstance(results, (tuple, list)) else results
            return self._body_source(value, single)
        return value.name

    def _body_source(self, fused, inner):
        """The DOT id of body node ``inner`` of fused call ``fused`` (inputs resolve to the outer values)."""
        if inner.op == "get_attr":
            return None  # a partition's parameters are drawn inside it, not as edges
        if inner.op == "placeholder":
            inputs = [n for n in self._body(fused).nodes if n.op == "placeholder"]
            outer = fused.args[inputs.index(inner)]
            return self.source_of(outer) if isinstance(outer, Node) else None
        return f"{fused.name}.{inner.name}"

    # -- building --------------------------------------------------------------------------
    def build(self, title):
        dot = DotGraph(title, label=title, labelloc="t", fontname="Helvetica", rankdir="TB",
                       node_defaults={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                      "fontsize": "11"},
                       edge_defaults={"fontname": "Helvetica", "fontsize": "9", "color": "#495057"})
        stages = {}
        for node in self.nodes:
            if node not in self.picks:
                stages.setdefault(node.meta.get("stage"), []).append(node)
        for stage, members in stages.items():
            if stage is None:
                self._declare(dot, members)
            else:
                with dot.cluster(f"stage {stage}", **STAGE_CLUSTER):
                    self._declare(dot, members)
        for node in self.nodes:
            if node not in self.picks:
                self._edges(dot, node)
        return dot

    def _declare(self, dot, nodes):
        for node in nodes:
            body = self._body(node)
            if body is None:
                dot.node(node.name, label=_label(node.name, self._describe(node)), fillcolor=self._color(node),
                         tooltip=node.format_node() if node.op == "output" else format_operation(node))
                continue
            kind = "partition" if "partition" in node.meta else "fused"
            with dot.cluster(f"{format_target(node)} ({kind})", tooltip=format_operation(node), **FUSED_CLUSTER):
                for inner in body.nodes:
                    if inner.op == "call":
                        dot.node(self._body_source(node, inner), label=_label(inner.name, format_target(inner)),
                                 fillcolor=COLORS["op"], tooltip=format_operation(inner))

    def _edges(self, dot, node):
        body = self._body(node)
        if body is None:
            picked = node.is_op(_GETITEM) and type(node.args[1]) is int
            for value in node.all_input_nodes:
                # an edge into getitem(x, 2) carries the picked element, not all of x
                shown = node if picked and value is node.args[0] else value
                self._edge(dot, self.source_of(value), node.name, shown)
            return
        for inner in body.nodes:
            if inner.op != "call":
                continue
            head = self._body_source(node, inner)
            for value in inner.all_input_nodes:
                outer = None
                if value.op == "placeholder":
                    inputs = [n for n in body.nodes if n.op == "placeholder"]
                    outer = node.args[inputs.index(value)]
                self._edge(dot, self._body_source(node, value), head, outer if isinstance(outer, Node) else value)

    @staticmethod
    def _edge(dot, tail, head, value):
        if tail is not None:
            dot.edge(tail, head, label=format_type(value.meta) or None)

    def _describe(self, node):
        if node.op == "placeholder":
            return "input"
        if node.op == "output":
            return "output"
        if node.op == "get_attr" or not isinstance(node.target, str):
            return format_target(node)
        module = self._module(node.target)
        return type(module).__name__ if module is not None else format_target(node)

    def _color(self, node):
        if node.op != "call":
            return COLORS[node.op]
        if isinstance(node.target, Op):
            return COLORS["op"]
        return COLORS["module" if isinstance(node.target, str) else "function"]

    def _module(self, qualname):
        if self.gm is None:
            return None
        try:
            return self.gm.get_submodule(qualname)
        except AttributeError:
            return None
