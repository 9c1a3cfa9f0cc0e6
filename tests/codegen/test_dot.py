"""`DotGraph`: DOT text whose quoting no name or label can break, clusters that always close."""
import json
import shutil
import subprocess

import pytest

from fxkit.codegen.dot import DotGraph, quote


@pytest.mark.parametrize("text, expected", [
    ("relu", '"relu"'),
    ('say "hi"', '"say \\"hi\\""'),
    ("a\\b", '"a\\\\b"'),
    ("two\nlines", '"two\\nlines"'),
    ("windows\r\nline", '"windows\\nline"'),
    ("f32[8, 3]", '"f32[8, 3]"'),
    (3, '"3"'),
])
def test_quote(text, expected):
    assert quote(text) == expected


def test_structure():
    dot = DotGraph("g", node_defaults={"shape": "box"}, rankdir="LR")
    dot.node("a", label="A")
    with dot.cluster("outer", color="gray"):
        dot.node("b")
        with dot.cluster("inner"):
            dot.node("c", label=None)
    dot.edge("a", "b", label="f32[1]")
    assert dot.source() == (
        'digraph "g" {\n'
        '    rankdir="LR";\n'
        '    node [shape="box"];\n'
        '    "a" [label="A"];\n'
        '    subgraph "cluster_0" {\n'
        '        label="outer";\n'
        '        color="gray";\n'
        '        "b";\n'
        '        subgraph "cluster_1" {\n'
        '            label="inner";\n'
        '            "c";\n'
        '        }\n'
        '    }\n'
        '    "a" -> "b" [label="f32[1]"];\n'
        '}\n')
    assert dot.source() == dot.source()  # reading the source does not change the graph


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_hostile_names_stay_names():
    """Quotes, braces, semicolons and backslashes in names reach Graphviz as text (no injection)."""
    hostile = 'x"; evil -> x; "{'
    dot = DotGraph("g")
    dot.node(hostile, label="back\\slash } {")
    dot.node("y")
    dot.edge(hostile, "y")
    result = subprocess.run(["dot", "-Tjson"], input=dot.source(), capture_output=True, text=True, check=True)
    drawn = json.loads(result.stdout)
    assert [o["name"] for o in drawn["objects"]] == [hostile, "y"]
    assert len(drawn["edges"]) == 1
