"""The exceptions fxkit raises, in one place.

Every error says what went wrong (with the actual shapes, dtypes or devices),
where (the op, the graph node and the user's source line when known) and how
to fix it. Each class also derives from the builtin exception a Python user
would catch for that kind of mistake (``ValueError`` for shapes, ``TypeError``
for dtypes, ...), so ``except ValueError`` keeps working.
"""


class FxkitError(Exception):
    """Base class of every error fxkit raises on purpose."""


class ShapeError(FxkitError, ValueError):
    """Tensor shapes that do not fit an operation."""


class DTypeError(FxkitError, TypeError):
    """A dtype an operation cannot take, or an unsafe cast."""


class DeviceError(FxkitError, RuntimeError):
    """Tensors on different devices, or a device that is not available."""


class TraceError(FxkitError, RuntimeError):
    """Symbolic tracing needed a concrete value it cannot have."""


class GraphError(FxkitError, RuntimeError):
    """A malformed graph, or a failure while running one of its nodes."""


class LoweringError(FxkitError, RuntimeError):
    """A backend cannot lower a graph or a node of it."""


def format_error(message, *, where=None, node=None, hint=None):
    """Join an error's parts in the layout of STYLE.md.

    >>> print(format_error("matmul: bad", where="m.py:3 in f", hint="fix it"))
    matmul: bad
      at m.py:3 in f
      hint: fix it
    """
    lines = [message]
    if where:
        lines.append(f"  at {where}")
    if node:
        lines.append(f"  node: {node}")
    if hint:
        lines.append(f"  hint: {hint}")
    return "\n".join(lines)


class IndexOutOfRangeError(FxkitError, IndexError):
    """An index or a dimension outside a tensor's range."""


class ValueRangeError(FxkitError, ValueError):
    """A value an operation cannot take: an integer division by zero, an infinity written
    into an integer tensor."""


class StateDictError(FxkitError, RuntimeError):
    """A state_dict that does not fit a module: missing or unexpected keys, shape mismatches."""


class AutogradError(FxkitError, RuntimeError):
    """A gradient that cannot be computed: through a non-differentiable op, a freed graph,
    or a value an in-place operation overwrote after it was saved for backward."""


class PipelineError(FxkitError, RuntimeError):
    """A pipeline that cannot go on: a stage failed, or a peer process died, hung, or runs a
    different pipeline (wrong number of ranks)."""


class DistributedError(FxkitError, RuntimeError):
    """A collective or a data-parallel step that cannot go on: a peer rank died, hangs, or runs
    a different program; a process group used before `init_process_group`; tensors that differ
    across ranks where they must agree."""


class ModelSpecError(FxkitError, ValueError):
    """A model named on the command line (``package.module:factory``, ``file.py:Class`` or a zoo
    name) that cannot be found, imported or built."""


class MissingToolError(FxkitError, RuntimeError):
    """An external program fxkit needs for a task (Graphviz's ``dot`` to render pictures) is not
    installed; the message names the package providing it."""


class ResourceLimitError(FxkitError, MemoryError):
    """A file or an argument that would make fxkit allocate more than it allows (a saved
    module or ONNX file far larger in memory than on disk); the message says how to allow more."""


class SpecializationError(FxkitError, AssertionError):
    """A graph traced with ``concrete_args`` was called with another value for a specialised
    argument. An ``AssertionError`` as well, since torch.fx's guard (``torch._assert``) raises one."""


class PassError(FxkitError, TypeError):
    """A pass or a check that does not fit the `PassManager` (a check taking other arguments
    than the module, a pass returning something that is no module)."""
