"""Jupyter display: a Graph as coloured HTML text, a GraphModule as its picture over that text."""
import html
import re

import pytest

import fxkit
from fxkit import models
from fxkit.graph import draw as draw_module
from fxkit.graph.display import highlighted
from fxkit.transforms import infer_shapes


@pytest.fixture
def lenet():
    model, shapes = models.get("lenet")
    return infer_shapes(fxkit.symbolic_trace(model), *shapes)


def _text(fragment):
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_highlighting_keeps_the_text(lenet):
    text = highlighted(lenet.graph)
    assert text.plain == str(lenet.graph)
    styled = {text.plain[span.start:span.end]: str(span.style) for span in text.spans}
    assert styled["%conv1"] == "cyan"
    assert styled["call"] == "bold blue" and styled["placeholder"] == "bold green"
    assert styled["f32[64, 10, 24, 24]"] == "green"


def test_graph_html(lenet):
    fragment = lenet.graph._repr_html_()
    assert fragment.startswith("<pre") and fragment.rstrip().endswith("</pre>")
    assert _text(fragment).strip() == str(lenet.graph)
    assert "color:" in fragment  # styled inline, no stylesheet needed


def test_module_html_without_graphviz(lenet, monkeypatch):
    monkeypatch.setattr(draw_module.shutil, "which", lambda name: None)
    assert lenet._repr_svg_() is None
    fragment = lenet._repr_html_()
    assert "<svg" not in fragment and "<b>Net</b>" in fragment
    assert str(lenet.graph) in _text(fragment)


@pytest.mark.skipif(draw_module.shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_module_svg_and_html_with_graphviz(lenet):
    svg = lenet._repr_svg_()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "conv1" in svg
    fragment = lenet._repr_html_()
    assert "<svg" in fragment and "<?xml" not in fragment and "<details>" in fragment
