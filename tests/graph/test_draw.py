"""`fxkit.draw` / `to_dot`: colours by opcode, shapes on edges, fused and stage clusters, rendering."""
import re
import shutil
import xml.etree.ElementTree as ElementTree

import pytest

import fxkit
from fxkit import models, nn
from fxkit.errors import GraphError, MissingToolError
from fxkit.graph import draw as draw_module
from fxkit.graph.draw import COLORS, to_dot, to_svg
from fxkit.transforms import fuse_elementwise, infer_shapes

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")


class Mixed(nn.Module):
    """One node of each kind: input, attribute, op call, module call, wrapped function, output."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(fxkit.ones(4))
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return halve(self.fc(x * self.scale))


@fxkit.wrap
def halve(x):
    return x / 2


def _nodes(text):
    """DOT node statements: id -> attribute text."""
    return dict(re.findall(r'^\s*"([^"]+)" \[(.*)\];$', text, re.MULTILINE))


def _edges(text):
    return re.findall(r'^\s*"([^"]+)" -> "([^"]+)"(?: \[label="([^"]*)"\])?;$', text, re.MULTILINE)


def test_colours_by_opcode_and_labels():
    gm = fxkit.symbolic_trace(Mixed())
    nodes = _nodes(to_dot(gm))
    assert f'fillcolor="{COLORS["placeholder"]}"' in nodes["x"] and 'label="x\\ninput"' in nodes["x"]
    assert f'fillcolor="{COLORS["get_attr"]}"' in nodes["scale"]
    assert f'fillcolor="{COLORS["op"]}"' in nodes["mul"] and 'tooltip="call[mul](%x, %scale)"' in nodes["mul"]
    assert f'fillcolor="{COLORS["module"]}"' in nodes["fc"] and 'label="fc\\nLinear"' in nodes["fc"]
    assert f'fillcolor="{COLORS["function"]}"' in nodes["halve"]
    assert f'fillcolor="{COLORS["output"]}"' in nodes["output"] and 'tooltip="return %halve"' in nodes["output"]
    assert len(set(COLORS.values())) == len(COLORS)


def test_edges_carry_shapes_when_known():
    gm = fxkit.symbolic_trace(Mixed())
    assert ("x", "mul", "") in _edges(to_dot(gm))  # no label before shapes are known
    infer_shapes(gm, (2, 4))
    edges = _edges(to_dot(gm))
    assert ("x", "mul", "f32[2, 4]") in edges and ("scale", "mul", "f32[4]") in edges
    assert ("halve", "output", "f32[2, 4]") in edges


def test_fused_group_is_a_cluster_wired_through():
    model, shapes = models.get("lstm_cell")
    gm = fuse_elementwise(infer_shapes(fxkit.symbolic_trace(model), *shapes))
    text = to_dot(gm)
    cluster = text[text.index('label="fused_0 (fused)"'):]
    cluster = cluster[:cluster.index("    }\n")]
    body_ops = re.findall(r'"fused_0_out\.(\w+)"', cluster)
    assert body_ops == ["sigmoid", "sigmoid_1", "tanh", "sigmoid_2", "mul", "mul_1", "add_1", "tanh_1", "mul_2"]
    edges = _edges(text)
    assert ("cx", "fused_0_out.mul", "f32[32, 256]") in edges  # an outer input into the body
    assert ("getitem", "fused_0_out.sigmoid", "f32[32, 256]") in edges
    # the getitem nodes picking results are drawn as the edges they stand for
    assert ("fused_0_out.mul_2", "output", "f32[32, 256]") in edges
    assert ("fused_0_out.add_1", "output", "f32[32, 256]") in edges
    assert "fused_0_out" not in _nodes(text) and "add_1" not in _nodes(text)


def test_stage_clusters():
    model, shapes = models.get("lenet")
    gm = fxkit.symbolic_trace(model)
    for node in gm.graph.nodes:
        if node.op == "call":
            node.meta["stage"] = 0 if node.name in ("conv1", "max_pool2d", "relu") else 1
    text = to_dot(gm)
    first, second = text.index('label="stage 0"'), text.index('label="stage 1"')
    assert first < text.index('"conv1" [') < second < text.index('"fc2" [')
    assert text.index('"x" [') < first  # inputs stay outside the stages


def test_graph_without_module():
    graph = fxkit.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call("layer", (x,)))
    nodes = _nodes(to_dot(graph))
    assert 'label="layer\\nself.layer"' in nodes["layer"]


def test_draw_writes_dot_and_rejects_no_suffix(tmp_path):
    gm = fxkit.symbolic_trace(Mixed())
    path = fxkit.draw(gm, tmp_path / "mixed.gv")
    assert path.read_text() == to_dot(gm)
    with pytest.raises(GraphError, match="has no suffix"):
        fxkit.draw(gm, tmp_path / "mixed")
    with pytest.raises(GraphError, match="expected a GraphModule or a Graph, got Mixed"):
        fxkit.draw(Mixed(), tmp_path / "m.dot")


def test_missing_graphviz(tmp_path, monkeypatch):
    monkeypatch.setattr(draw_module.shutil, "which", lambda name: None)
    gm = fxkit.symbolic_trace(Mixed())
    with pytest.raises(MissingToolError, match=r"apt-get install graphviz.*no pip package.*mixed\.dot"):
        fxkit.draw(gm, tmp_path / "mixed.svg")
    assert (tmp_path / "mixed.dot").read_text() == to_dot(gm)
    assert to_svg(gm) is None


@needs_dot
def test_svg_and_png(tmp_path):
    gm = infer_shapes(fxkit.symbolic_trace(Mixed()), (2, 4))
    root = ElementTree.fromstring(to_svg(gm))
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    titles = {t.text for t in root.iter("{http://www.w3.org/2000/svg}title")}
    assert {"x", "scale", "mul", "fc", "halve", "output"} <= titles
    png = fxkit.draw(gm, tmp_path / "mixed.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


@needs_dot
def test_dot_rejects_unknown_format(tmp_path):
    with pytest.raises(GraphError, match=r"`dot -Tnotaformat` failed"):
        fxkit.draw(fxkit.symbolic_trace(Mixed()), tmp_path / "mixed.notaformat")
