"""A failure inside generated code carries a note naming the generated line, the node and the
user's traced source line (torch.fx's "Call using an FX-traced Module")."""
import pytest

import fxkit
from fxkit import nn
from fxkit.transforms import split_module


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(fxkit.randn(4, 3))
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        h = x @ self.w
        return self.fc(h.relu())


def _notes(exc):
    return [n for n in getattr(exc, "__notes__", []) if n.startswith("Call using an fxkit GraphModule")]


def test_an_op_failing_in_generated_code_gets_a_note_with_node_and_source_line():
    gm = fxkit.symbolic_trace(Scale())
    with pytest.raises(fxkit.ShapeError, match="cannot be multiplied") as info:
        gm(fxkit.randn(2, 5))
    (note,) = _notes(info.value)
    assert "line 3 of its generated forward: matmul = x @ w" in note
    assert "node: %matmul = call[matmul](%x, %w)" in note
    assert "test_call_errors.py:17 in forward: h = x @ self.w" in note


def test_a_submodule_failing_is_left_to_its_own_traceback():
    model = Scale()
    model.fc = nn.Linear(5, 2)  # the relu output has 3 features
    gm = fxkit.symbolic_trace(model)
    with pytest.raises(fxkit.ShapeError) as info:
        gm(fxkit.randn(2, 4))
    assert _notes(info.value) == []


def test_a_split_module_notes_the_child_that_failed_once():
    gm = fxkit.symbolic_trace(Scale())
    parent = split_module(gm, lambda n: 0 if n.op == "call" and n.is_op("matmul") else 1)
    with pytest.raises(fxkit.ShapeError) as info:
        parent(fxkit.randn(2, 5))
    (note,) = _notes(info.value)
    assert "node: %matmul = call[matmul](%x, %w)" in note


def test_a_graph_module_called_inside_a_trace_is_still_a_leaf_call():
    # GraphModule.__call__ adds the note through Module.__call__, which the tracer watches.
    class Outer(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x).relu()

    class KeepGraphModules(fxkit.Tracer):
        def is_leaf_module(self, module, qualname):
            return isinstance(module, fxkit.GraphModule) or super().is_leaf_module(module, qualname)

    inner = fxkit.symbolic_trace(Scale())
    graph = KeepGraphModules().trace(Outer(inner))
    assert [n.target for n in graph.find_nodes(op="call") if type(n.target) is str] == ["inner"]
