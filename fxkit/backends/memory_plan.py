"""Buffer reuse: ops that can write into an ``out=`` buffer take one that is dead.

Allocating a fresh array per op costs page faults that can exceed the
arithmetic (a new 64 MB array is ~30 ms of faults on the reference machine).
Generated code reuses instead: an op that can write into a given buffer
(`UFUNC_FORMS`: the registry ops that are exactly one numpy/cupy ufunc on
floating inputs) writes into the buffer of a value no one reads any more, when
that buffer has the result's shape and dtype. ``x = x * x`` ten times then
allocates once::

    mul = multiply(x, x)
    mul_1 = multiply(mul, mul, out=mul)
    ...

Liveness is over *storage*, not values: a call that may return a view of its
input (``view``, ``getitem``, ``transpose``, ``to``, anything not known to
allocate) keeps its inputs' storage alive as long as it is alive itself, and
storage reachable from the graph's output is never reused. Only storage the
generated code allocated itself is ever reused (results of ops that always
allocate, see `allocates`): never a graph input, a parameter or a constant.

The rule every compiled module keeps (the numba backend's output pools keep it
at run time with reference counts, `fxkit.backends.numba_launch`): **a buffer is
written only when nothing outside the plan can still reach it.** This plan
proves it ahead of time, so storage that leaves its sight *escapes* and is
never reused: storage handed to code other than fxkit's registry ops and fused
kernels (`may_keep_references`: a wrapped function such as ``capture(t)`` that
appends ``t`` to a list, a submodule and its hooks), and storage returned to
the caller (with every view of it).
A buffer the current op reads may be reused only when it is read directly
(same array, same layout), so even a naive elementwise kernel may write
element i after reading element i.

Values are identical to eager execution; the memory layout of a reused buffer
is the layout the buffer was first allocated with (C order unless the first
op's inputs were transposed), which no op's result depends on.
"""
import math
from typing import NamedTuple

from fxkit.codegen.promotion import input_casts
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.transforms.fused_op import FusedOp


class UfuncForm(NamedTuple):
    """How an op runs as one ufunc of the array module: ``xp.<ufunc>(*inputs, *extra, out=buf)``.

    Attributes:
        ufunc: the ufunc's name in numpy and cupy.
        inputs: how many leading arguments of the op are the ufunc's inputs;
            the op's other arguments must be at their defaults.
        extra: constant arguments appended after the inputs.
    """

    ufunc: str
    inputs: int
    extra: tuple = ()


def _forms():
    binary = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "true_divide",
              "floor_divide": "floor_divide", "remainder": "remainder", "pow": "power", "maximum": "maximum",
              "minimum": "minimum", "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
              "gt": "greater", "ge": "greater_equal"}
    unary = {"neg": "negative", "abs": "absolute", "exp": "exp", "log": "log", "log1p": "log1p",
             "expm1": "expm1", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tanh": "tanh",
             "reciprocal": "reciprocal", "floor": "floor", "ceil": "ceil", "isnan": "isnan"}
    forms = {get_op(name): UfuncForm(ufunc, 2) for name, ufunc in binary.items()}
    forms.update({get_op(name): UfuncForm(ufunc, 1) for name, ufunc in unary.items()})
    # NOTE: False, as relu's impl writes it: a bool tensor and the int 0 would give int64.
    forms[get_op("relu")] = UfuncForm("maximum", 1, (False,))
    return forms


# Op -> its ufunc form. For float32/float64 inputs each of these ops' implementation
# is exactly this one ufunc call (same loop, same result), which can take ``out=``.
UFUNC_FORMS = _forms()
_FLOATS = frozenset(("float32", "float64"))
# Op kinds whose results are new arrays, never their inputs or views of them ...
_ALLOCATING_KINDS = frozenset(("elementwise", "matmul", "conv", "reduction"))
# ... except these ops, which can return a view (numpy's einsum does for 'ij->ji').
_MAY_RETURN_VIEWS = frozenset((get_op("einsum"),))
_SCALARS = (int, float, bool)


def ufunc_forms(nodes):
    """``{node: UfuncForm}`` for every call among ``nodes`` that runs as one ufunc (see `ufunc_form`)."""
    forms = {}
    for node in nodes:
        if node.op == "call" and isinstance(node.target, Op):
            form = ufunc_form(node, input_dtypes(node))
            if form is not None:
                forms[node] = form
    return forms


def input_dtypes(node):
    """``{position: DType}`` of a call's positional tensor inputs after its op's dtype promotion."""
    metas = [a.meta.get("tensor_meta") if hasattr(a, "meta") and hasattr(a, "op") else a for a in node.args]
    casts = input_casts(node.target, metas)
    return {i: casts.get(i, m.dtype) for i, m in enumerate(metas) if isinstance(m, TensorMeta)}


def ufunc_form(node, input_dtypes):
    """The `UfuncForm` ``node`` runs as, or None when it must call its op's implementation.

    Args:
        node: a ``call`` node whose ``meta["tensor_meta"]`` is filled.
        input_dtypes: the dtype of each positional tensor argument after the op's
            dtype promotion (position -> `DType`).

    Returns:
        The form when the node's op is in `UFUNC_FORMS`, its tensor inputs are
        float32/float64 after promotion, its other inputs are Python numbers,
        its remaining arguments are at their defaults and its result is an
        array of at least one dimension (numpy returns scalars for 0-d).
    """
    op = node.target
    form = UFUNC_FORMS.get(op) if isinstance(op, Op) else None
    if form is None:
        return None
    result = node.meta.get("tensor_meta")
    if not isinstance(result, TensorMeta) or not result.shape:
        return None
    if len(node.args) < form.inputs or not _at_defaults(op, node, form.inputs):
        return None
    for position, value in enumerate(node.args[:form.inputs]):
        dtype = input_dtypes.get(position)
        if dtype is not None:
            if dtype.name not in _FLOATS:
                return None
        elif type(value) not in _SCALARS:
            return None
    return form


def allocates(node):
    """True when ``node``'s result is one new array of at least one dimension (a storage of its own).

    A call of a pure op of an allocating kind qualifies unless it asks to work
    in place (``relu(x, inplace=True)`` returns ``x``).
    """
    op = node.target
    if node.op != "call" or not isinstance(op, Op) or not op.pure or op.kind not in _ALLOCATING_KINDS:
        return False
    if op in _MAY_RETURN_VIEWS:
        return False
    result = node.meta.get("tensor_meta")
    if not isinstance(result, TensorMeta) or not result.shape:
        return False
    return _argument(op, node, "inplace") is not True


def _argument(op, node, name):
    """The value ``node`` passes for the impl's parameter ``name`` (its default when not given)."""
    if name in node.kwargs:
        return node.kwargs[name]
    names = [n for n, _ in _defaults(op)]
    if name not in names:
        return None
    position = names.index(name)
    return node.args[position] if position < len(node.args) else _defaults(op)[position][1]


def _defaults(op):
    """``[(parameter, default)]`` of ``op``'s impl after ``xp``."""
    return [(p.name, p.default) for p in op.signature.parameters.values()]


def _at_defaults(op, node, inputs):
    """True when every argument of ``node`` after the first ``inputs`` equals the impl's default."""
    defaults = _defaults(op)
    names = [name for name, _ in defaults]
    for position, value in enumerate(node.args[inputs:], start=inputs):
        if position >= len(defaults) or not _same(value, defaults[position][1]):
            return False
    for key, value in node.kwargs.items():
        if key not in names[inputs:] or not _same(value, defaults[names.index(key)][1]):
            return False
    return True


def _same(value, default):
    return type(value) is type(default) and value == default


def plan_buffers(nodes, writers):
    """Choose, for each node in ``writers``, a dead buffer to write its result into.

    Args:
        nodes: the graph's nodes in execution order.
        writers: the nodes that can write their result into a buffer given to
            them (a set or dict); their results are new arrays otherwise.

    Returns:
        ``{node: holder}``: ``node`` writes into the buffer that ``holder``'s
        value is (``holder``'s variable must stay alive until ``node`` runs).
        Writers left out allocate a new array.
    """
    position = {node: i for i, node in enumerate(nodes)}
    last_use = {}
    for node in nodes:
        when = math.inf if node.op == "output" else position[node]
        for used in node.all_input_nodes:
            last_use[used] = when
    aliases = {}  # node -> the storages (ids) its value may share memory with
    end = []  # storage -> position of the last read of any value sharing it
    holder = []  # storage -> the node whose variable holds it now
    by_key = {}  # (shape, dtype) -> storages ever allocated with that key
    plan = {}
    for i, node in enumerate(nodes):
        writer = node in writers
        if writer or allocates(node):
            meta = node.meta["tensor_meta"]
            wanted = (tuple(meta.shape), meta.dtype)
            storage = _dead_storage(by_key.get(wanted, ()), end, holder, aliases, i, node) if writer else None
            if storage is None:
                storage = len(end)
                end.append(0)
                holder.append(node)
                by_key.setdefault(wanted, []).append(storage)
            else:
                plan[node] = holder[storage]
                holder[storage] = node
            aliases[node] = (storage,)
            end[storage] = last_use.get(node, i)
        elif node.op == "call":
            shared = {s for used in node.all_input_nodes for s in aliases.get(used, ())}
            aliases[node] = tuple(shared)
            until = math.inf if may_keep_references(node) else last_use.get(node, i)
            for s in shared:
                end[s] = max(end[s], until)
    return plan


def may_keep_references(node):
    """True when ``node`` calls code that may keep a reference to its arguments past the call.

    Registry ops and fused groups of them only read their inputs (views they
    return are followed as aliases); anything else (a wrapped function, a
    submodule with its hooks, a backend's opaque callable) may store what it is
    given, so its inputs' storage escapes the plan.
    """
    return node.op == "call" and not isinstance(node.target, (Op, FusedOp))


def _dead_storage(candidates, end, holder, aliases, i, node):
    """A storage among ``candidates`` no one reads after ``i`` (and ``node`` at ``i`` only directly), or None."""
    for s in candidates:
        if end[s] < i:
            return s
        if end[s] == i and all(used is holder[s] for used in node.all_input_nodes if s in aliases.get(used, ())):
            return s
    return None
