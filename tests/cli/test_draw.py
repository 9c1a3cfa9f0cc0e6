"""``fxkit draw``: DOT always, SVG/PNG through Graphviz's dot, a clear message without it."""
import os
import struct
import sys
import xml.etree.ElementTree as ElementTree

import pytest

from tests.cli.run import assert_error_panel, fxkit, needs_dot

pytestmark = pytest.mark.slow


def test_dot_output_needs_no_graphviz(tmp_path):
    result = fxkit("draw", "lenet", "-o", "lenet.dot", cwd=tmp_path, path=os.path.dirname(sys.executable))
    assert result.returncode == 0, result.stderr
    assert "wrote lenet.dot" in result.stdout
    text = (tmp_path / "lenet.dot").read_text()
    assert text.startswith('digraph "Net" {') and text.rstrip().endswith("}")
    assert '"conv1" [label="conv1\\nConv2d", fillcolor="#e2d9f3"' in text  # module call: purple
    assert '"x" -> "conv1" [label="f32[64, 1, 28, 28]"];' in text  # shapes on edges


def test_fused_groups_and_stages_are_clusters(tmp_path):
    result = fxkit("draw", "lstm_cell", "--fuse", "-o", "lstm.dot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "lstm.dot").read_text()
    assert 'label="fused_0 (fused)";' in text
    assert '"fused_0_out.tanh_1" -> "fused_0_out.mul_2"' in text
    result = fxkit("draw", "resnet18", "--stages", "3", "-o", "resnet18.dot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "resnet18.dot").read_text()
    assert all(f'label="stage {i}";' in text for i in range(3)) and 'label="stage 3";' not in text


@needs_dot
def test_svg_is_a_valid_image(tmp_path):
    result = fxkit("draw", "lenet", "-o", "lenet.svg", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    root = ElementTree.parse(tmp_path / "lenet.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    titles = {element.text for element in root.iter("{http://www.w3.org/2000/svg}title")}
    assert {"x", "conv1", "fc2", "output", "x->conv1", "fc2->log_softmax"} <= titles  # nodes and edges


@needs_dot
def test_png_is_a_valid_image(tmp_path):
    result = fxkit("draw", "mlp", "-o", "mlp.png", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = (tmp_path / "mlp.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 50 and height > 200  # a column of 8 boxes


def test_without_graphviz_writes_dot_names_the_package_and_succeeds(tmp_path):
    result = fxkit("draw", "mlp", "-o", "mlp.svg", cwd=tmp_path, path=os.path.dirname(sys.executable))
    assert result.returncode == 0, result.stderr
    assert "wrote mlp.dot (8 nodes)" in result.stdout
    for phrase in ("note:", "Graphviz", "apt-get install graphviz", "no pip package", "mlp.dot"):
        assert phrase in result.stderr
    assert not (tmp_path / "mlp.svg").exists()
    assert (tmp_path / "mlp.dot").read_text().startswith('digraph "MLP" {')


def test_output_without_suffix(tmp_path):
    result = fxkit("draw", "mlp", "-o", "picture", cwd=tmp_path)
    assert_error_panel(result, "GraphError", "has no suffix", ".svg")


def test_partitions_of_a_delegate_are_clusters(tmp_path):
    pytest.importorskip("onnxruntime")
    result = fxkit("draw", "mlp", "--partition", "onnxruntime", "-o", "mlp.dot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "mlp.dot").read_text()
    assert 'label="self.supported_0 (partition)";' in text
    assert '"supported_0.linear" [label="linear"' in text
