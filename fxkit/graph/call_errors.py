"""Where in a `GraphModule`'s generated code an exception came from, added to the exception as a note.

A failure inside generated ``forward`` code shows, in the traceback, only the
generated line (``matmul = w @ x``). torch.fx prints that line with "Call using
an FX-traced Module"; fxkit adds a note (PEP 678) to the exception naming the
generated line, the graph node and the user's source line the tracer recorded
for it, so the traceback leads back to the model's own code::

    ShapeError: matmul: mat1 and mat2 shapes cannot be multiplied (1x5 and 4x1)
    Call using an fxkit GraphModule, line 3 of its generated forward: matmul = w @ x
      node: %matmul = call[matmul](%w, %x)
      traced from model.py:7 in forward: return fxkit.matmul(self.W, x)

The exception keeps its type. Nothing is added when the failing statement calls
a submodule: the submodule's own frames (or, for a child `GraphModule`, its own
note) already say where it failed, as torch.fx leaves those alone.
"""
import ast

_HEADER = "Call using an fxkit GraphModule"


def note_generated_frame(gm, exc):
    """Add the note described in the module docstring to ``exc`` when it failed in ``gm``'s code."""
    filename = gm.__dict__.get("_linecache_key")
    code = gm.__dict__.get("_python_code")
    if filename is None or code is None:
        return
    lineno = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    if lineno is None:
        return
    node, text = _statement_at(code, lineno)
    if node is None or (node.op == "call" and type(node.target) is str):
        return
    lines = [f"{_HEADER}, line {lineno} of its generated forward: {text}", f"  node: {node.format_node()}"]
    if node.stack is not None:
        lines.append(f"  traced from {node.stack}")
    exc.add_note("\n".join(lines))


def _statement_at(code, lineno):
    """The graph node computed by the statement covering ``lineno`` of the generated source, and its text."""
    src = code.src
    body = ast.parse(src).body[0].body
    for statement, node in zip(body, code.statement_nodes):
        if statement.lineno <= lineno <= statement.end_lineno:
            return node, ast.get_source_segment(src, statement)
    return None, ""
