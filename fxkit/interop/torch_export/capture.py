"""Capturing a PyTorch model with ``torch.export`` and lowering it toward core ATen.

`capture` runs ``torch.export.export(..., strict=False)`` and then
``run_decompositions`` with `decomposition_table`: torch's default table
(core ATen) minus every overload fxkit has a registry twin for, so
``linear``, ``layer_norm``, ``gelu`` or ``scaled_dot_product_attention``
stay one node each while ops with no twin are broken into ops that have one.
The decomposition also functionalises the graph (``relu_`` becomes ``relu``,
``x[:, 0] = 0`` a ``select_scatter``).

When torch.export refuses the model, `capture_error` turns its exception into
a `TraceError` naming the user's frame (file:line and source), the construct
torch stopped at and the fix.
"""
import os
import re
import traceback
import warnings

from fxkit.errors import TraceError, format_error
from fxkit.interop.torch_export.aten_table import ATEN, DROPPED
from fxkit.interop.torch_export.convert import INLINED, functional_spelling, rule_of, target_name
from fxkit.runtime.registry import all_ops

def decomposition_table(torch):
    """torch's core-ATen decomposition table without the overloads fxkit keeps whole.

    A table entry naming a registry op that is not registered yet is left to
    torch's decomposition, so the model still comes in through smaller ops.
    """
    table = torch.export.default_decompositions()
    registered = {op.name for op in all_ops()}
    for spelling, rule in ATEN.items():
        if not isinstance(rule, str) or rule in registered:
            overload = resolve_overload(torch, spelling)
            if overload is not None:
                table.pop(overload, None)
    return table


def needs_decomposition(program):
    """Whether ``program`` (torch.export's training IR) needs ``run_decompositions`` before the table.

    Decomposing re-traces the whole program (seconds to a minute for a
    convnet), so it is skipped when every op already has a rule and every
    in-place op can simply become its out-of-place twin: the tensor it writes
    is no view, no input and read by nothing else (``ReLU(inplace=True)``
    after a convolution, ``out += identity`` in a residual block). Anything
    else (a write into a slice, an op with no rule) goes through torch's
    functionalisation and decompositions.
    """
    registered = {op.name for op in all_ops()}
    nodes = [n for module in program.graph_module.modules() if hasattr(module, "graph") for n in module.graph.nodes]
    for node in nodes:
        if node.op != "call_function":
            continue
        spelling = target_name(node.target)
        if spelling in DROPPED or spelling in INLINED or spelling == "operator.getitem":
            continue
        if rule_of(spelling, registered) is None:
            return True
        if functional_spelling(spelling) != spelling and not _replaceable_in_place(node):
            return True
    return False


def _replaceable_in_place(node):
    """Whether the tensor an in-place op writes is a fresh computed value only this op reads,
    or the op writes nothing (``Dropout(inplace=True)`` in eval mode)."""
    if target_name(node.target) == "aten.dropout_.default" and node.args[2:3] == (False,):
        return True
    written = node.args[0] if node.args else None
    producer = getattr(written, "target", None)
    return (getattr(written, "op", None) == "call_function" and len(written.users) == 1
            and not getattr(producer, "is_view", True))


def resolve_overload(torch, spelling):
    """``"aten.add.Tensor"`` as the `OpOverload` object, or None when this torch has no such overload."""
    namespace, packet, overload = spelling.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet, None), overload, None)


def capture(torch, model, args, kwargs, dynamic_shapes):
    """The decomposed ``ExportedProgram`` of ``model(*args, **kwargs)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's notes on its own internals (pytree specs)
        try:
            program = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=False)
            if not needs_decomposition(program):
                return program
            return program.run_decompositions(decomposition_table(torch))
        except Exception as exc:  # noqa: BLE001  (torch.export raises many unrelated exception classes)
            raise capture_error(torch, model, exc) from exc


def _torch_dir(torch):
    return os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))


def user_frame(torch, exc):
    """The innermost frame of ``exc``'s traceback outside torch, fxkit and the standard library."""
    skipped = (os.path.dirname(os.path.abspath(torch.__file__)),
               os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
               os.path.dirname(os.path.abspath(os.__file__)))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(skipped)]
    if frames:
        return frames[-1]
    found = re.search(r'File "([^"]+)", line (\d+), in (\w+)\n\s*(.*)', str(exc))
    if found:
        return traceback.FrameSummary(found[1], int(found[2]), found[3], line=found[4])
    return None


# (what torch's message says, the construct in words, the fix)
_CONSTRUCTS = (
    (r"data-dependent|GuardOnDataDependent|item\(\)",
     "Python control flow or a size that depends on a tensor's values (a branch on x.sum() > 0, int(x), "
     ".item(), .tolist(), nonzero)",
     "compute both branches and pick with torch.where, use torch.cond, or make the value a constant "
     "(a Python number instead of a tensor)"),
    (r"Constraints violated|specialized|marked as dynamic|Not all values of",
     "a dimension declared dynamic that the code fixes to one value (a check or branch on its size)",
     "drop that dimension from dynamic_shapes, or remove the size check from forward"),
    (r"no fake|fake impl|does not have a meta|Meta kernel|not implemented for 'Meta'",
     "an operator with no shape implementation for torch.export (a custom or C++ extension op)",
     "register a fake kernel with torch.library.register_fake, or replace the op with torch functions"),
)


def capture_error(torch, model, exc):
    """A `TraceError` for an exception torch.export raised on ``model``."""
    text = f"{type(exc).__name__}: {exc}"
    construct, fix = "a construct torch.export cannot capture", (
        "rewrite that line with torch functions (no Python side effects or data-dependent control flow), "
        "or convert the model to ONNX and use fxkit.from_onnx")
    for pattern, what, how in _CONSTRUCTS:
        if re.search(pattern, text):
            construct, fix = what, how
            break
    op = re.search(r"\b(aten|torchvision|prims)::?\.?(\w+)", text)
    frame = user_frame(torch, exc)
    where = f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}" if frame else None
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    said = [lines[0][:300]] + [line.strip()[:300] for line in lines[1:] if line.lstrip().startswith("- ")][:4]
    detail = f" (op {op[0]})" if op else ""
    message = (f"fxkit.from_torch: torch.export cannot capture {type(model).__name__}: {construct}{detail}\n"
               f"  torch says: {type(exc).__name__}: " + "\n    ".join(said))
    return TraceError(format_error(message, where=where, hint=fix))
