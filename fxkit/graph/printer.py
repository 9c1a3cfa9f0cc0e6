"""The text forms of a graph: ``str(graph)`` and ``graph.print_tabular()``.

``str(graph)`` is stable (tests compare it with stored text) and reads like
the code it stands for, one node a line, with ``dtype[shape]`` when a pass
recorded ``meta["shape"]`` and ``meta["dtype"]``::

    graph(x):
        %x      : f32[3, 4] = placeholder[x]
        %param  : f32[3, 4] = get_attr[param]
        %add    : f32[3, 4] = call[add](%x, %param)
        return %add
"""
from fxkit.graph.call_targets import called_graph
from fxkit.graph.node import format_arg, format_operation, format_target
from fxkit.runtime.dtypes import DType
from fxkit.runtime.value_text import short_dtype


def format_type(meta):
    """``f32[3, 4]`` from a node's meta; ``(f32[3], i64[3])`` for several results; "" when unknown."""
    shape, dtype = meta.get("shape"), meta.get("dtype")
    if shape is None or dtype is None:
        return ""
    if isinstance(dtype, DType):
        return f"{short_dtype(dtype)}[{', '.join(str(d) for d in shape)}]".replace("\n", " ")
    if isinstance(dtype, (tuple, list)) and len(dtype) == len(shape):
        parts = [format_type({"shape": s, "dtype": d}) for s, d in zip(shape, dtype)]
        return "(" + ", ".join(parts) + ")" if all(parts) else ""
    return ""


def format_graph(graph):
    """The whole graph as text, columns aligned."""
    nodes = list(graph.nodes)
    params = ", ".join(n.target[:len(n.target) - len(n.target.lstrip("*"))] + n.name
                       for n in nodes if n.op == "placeholder")
    lines = [f"graph({params}):"]
    shown = [("%" + n.name, format_type(n.meta)) for n in nodes if n.op != "output"]
    width = max((len(name) for name, _ in shown), default=0)
    type_width = max((len(t) for _, t in shown), default=0)
    rows = iter(shown)
    for node in nodes:
        if node.op == "output":
            lines.append("    " + node.format_node())
            continue
        name, text = next(rows)
        if type_width:
            annotation = f" : {text.ljust(type_width)}" if text else " " * (type_width + 3)
        else:
            annotation = ""
        lines.append(f"    {name.ljust(width)}{annotation} = {format_operation(node)}")
    lines += _nested_bodies(nodes)
    return "\n".join(lines)


def _nested_bodies(nodes):
    """``with fused_0 = graph(x): ...`` for each call target holding a sub-graph
    (a `FusedOp`), once each, after the graph using it (TorchScript's FusionGroup)."""
    lines = []
    shown = set()
    for node in nodes:
        body = called_graph(node)
        if body is None or id(node.target) in shown:
            continue
        shown.add(id(node.target))
        lines += ["", f"with {format_target(node)} = {format_graph(body)}"]
    return lines


def print_tabular(graph, console=None):
    """Print ``graph`` as a rich table; ``console`` defaults to a new stdout console."""
    from rich.console import Console  # rich loads slowly; only tables need it
    from rich.table import Table
    from rich.text import Text

    nodes = list(graph.nodes)
    types = [format_type(n.meta) for n in nodes]
    table = Table("opcode", "name", "target", "args", "kwargs")
    if any(types):
        table.add_column("type")
    for node, text in zip(nodes, types):
        args = ", ".join(format_arg(a) for a in node.args)
        kwargs = ", ".join(f"{k}={format_arg(v)}" for k, v in node.kwargs.items())
        # Text cells: graph contents are never read as rich markup.
        row = [Text(node.op), Text(node.name), Text(format_target(node)), Text(args), Text(kwargs)]
        if any(types):
            row.append(Text(text))
        table.add_row(*row)
    (console or Console()).print(table)
