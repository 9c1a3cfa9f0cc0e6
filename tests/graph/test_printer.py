"""str(graph) against stored text (the architecture page's example), and the rich table."""
import pathlib

import rich.console

import fxkit
from fxkit import ops
from fxkit.graph import Graph
from tests.graph.builders import my_module_graph

EXPECTED = pathlib.Path(__file__).parent / "expected"
SHAPES = [(3, 4), (3, 4), (3, 4), (3, 5), (3, 5)]


def _expected(name):
    return (EXPECTED / name).read_text().rstrip("\n")


def _with_shapes(graph):
    for node, shape in zip(graph.nodes, SHAPES):
        node.meta["shape"] = shape
        node.meta["dtype"] = fxkit.float32
    return graph


def test_design_example_without_shapes():
    assert str(my_module_graph()) == _expected("my_module.txt")


def test_design_example_with_shapes():
    assert str(_with_shapes(my_module_graph())) == _expected("my_module_shapes.txt")


def helper(value):
    return value


def _mixed_graph():
    g = Graph()
    x = g.placeholder("x")
    n = g.placeholder("n", default=2)
    pick = g.call(ops.getitem, (x, (slice(None, None, None), 0)))
    top = g.call(ops.max, (x,), {"dim": 1})
    values = g.call(ops.getitem, (top, 0))
    h = g.call(helper, (values, n), {"mode": "a'b"})
    cast = g.call(ops.to, (h,), {"dtype": fxkit.int64})
    g.output({"out": (pick, cast), "list": [n]})
    x.meta.update(shape=(2, "N"), dtype=fxkit.float32)
    top.meta.update(shape=((2,), (2,)), dtype=(fxkit.float32, fxkit.int64))
    return g


def test_mixed_graph_stored_text():
    assert str(_mixed_graph()) == _expected("mixed.txt")


def test_print_tabular():
    console = rich.console.Console(record=True, width=160)
    _with_shapes(my_module_graph()).print_tabular(console=console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "┃" in line)
    assert [c.strip() for c in header.split("┃")[1:-1]] == ["opcode", "name", "target", "args", "kwargs", "type"]
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line]
    assert rows[0] == ["placeholder", "x", "x", "", "", "f32[3, 4]"]
    assert rows[2] == ["call", "add", "add", "%x, %param", "", "f32[3, 4]"]
    assert rows[3] == ["call", "linear", "self.linear", "%add", "", "f32[3, 5]"]
    assert rows[4] == ["call", "clamp", "clamp", "%linear", "min=0.0, max=1.0", "f32[3, 5]"]
    assert rows[5] == ["output", "output", "output", "%clamp", "", ""]


def test_print_tabular_does_not_read_markup():
    g = Graph()
    x = g.placeholder("x")
    g.output(g.call(ops.add, (x, "[bold red]not markup[/]")))
    console = rich.console.Console(record=True, width=160)
    g.print_tabular(console=console)
    assert "'[bold red]not markup[/]'" in console.export_text()
