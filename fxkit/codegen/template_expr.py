"""What every kernel generator reads from a registry op's template, whatever language it writes.

An elementwise op's ``template`` is a Python expression over its inputs
``a, b, c`` and its defaulted keyword names, calling the intrinsics of
``fxkit.runtime.ops.intrinsics`` (see tests/runtime/test_templates.py). A
generator (numba's `fxkit.codegen.numba_scalar`, CUDA C's
`fxkit.codegen.cuda_expr`) needs, for one ``call`` node of a fused body,
the same three things, decided here once:

* the metadata of every body value (`value_metas`), from the ops' shape rules;
* the dtype the op computes in (`compute_dtype`): PyTorch's promotion, as
  eager's ``Op.run`` casts the arrays before the implementation runs;
* which template name stands for which argument, and which of them are cast
  to the compute dtype (`bind_call`).

The generators then only translate the template's ``ast`` into their
language. Example::

    >>> call = bind_call(node, metas)           # %add = call[add](%x, 2, alpha=3), x: i32[4]
    >>> ast.unparse(call.tree), call.dtype, call.operands
    ('a + b * alpha', fxkit.int32, {'a': (x, fxkit.int32), 'b': (2, fxkit.int32), 'alpha': (3, fxkit.int32)})
"""
import ast
import inspect
from typing import NamedTuple

from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta

INPUT_NAMES = ("a", "b", "c")


def value_metas(graph, args):
    """Each body node's `TensorMeta` (or Python value) from the fused op's arguments.

    Args:
        graph: a fused op's body.
        args: per placeholder, a `TensorMeta` or the Python value it receives.
    """
    env = {}
    inputs = iter(args)
    for node in graph.nodes:
        if node.op == "placeholder":
            env[node] = next(inputs)
        elif node.op == "call":
            env[node] = node.target.shape_rule(*_resolve(node.args, env), **_resolve(node.kwargs, env))
    return env


def _resolve(value, env):
    if type(value) is tuple:
        return tuple(_resolve(v, env) for v in value)
    if isinstance(value, list):  # a node's lists are list subclasses that refuse edits
        return [_resolve(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, env) for k, v in value.items()}
    return env[value] if is_node(value) else value


def is_node(value):
    """Whether ``value`` is a graph node (read without importing `fxkit.graph`)."""
    return hasattr(value, "op") and hasattr(value, "users")


def compute_dtype(op, metas, result):
    """The dtype ``op`` computes in (None: inputs as they are), as tests/runtime/test_templates decides.

    Promoting ops compute in their result's dtype (eager casts the inputs to
    it: `fxkit.codegen.promotion.input_casts`); comparisons in the result type
    of their inputs, Python numbers included.
    """
    mode = op.promote
    if mode in (None, "bool", "keep"):
        return None
    if mode != "compare":
        return result.dtype
    promoted = metas[op.promote_from:]
    tensors = [m for m in promoted if isinstance(m, TensorMeta)]
    scalars = [m for m in promoted if type(m) in (int, float, bool)]
    return _dt.result_type([t.dtype for t in tensors if t.shape], [t.dtype for t in tensors if not t.shape],
                           scalars)


def template_names(op, args, kwargs):
    """``({template name: argument}, {option name: value})`` of one call, as tests/runtime/test_templates binds."""
    arguments = op.bind(args, kwargs)
    params = op.signature.parameters.values()
    inputs = [p.name for p in params if p.default is inspect.Parameter.empty]
    names = {INPUT_NAMES[i]: arguments[p] for i, p in enumerate(inputs)}
    options = {p.name: arguments[p.name] for p in params if p.default is not inspect.Parameter.empty}
    return names, options


class TemplateCall(NamedTuple):
    """One call node's template, bound to its arguments.

    Attributes:
        tree: the template's expression ``ast`` (a fresh parse: generators may rewrite it).
        operands: ``{template name: (argument, dtype or None)}``: the argument (a
            body node or a Python value) and the dtype it is converted to first
            (None: used as it is).
        dtype: the dtype the op computes in (None for ops computing in their inputs' types).
        result: the node's `TensorMeta`.
    """

    tree: ast.expr
    operands: dict
    dtype: object
    result: TensorMeta


def bind_call(node, metas):
    """Bind the template of the ``call`` node ``node`` (see `TemplateCall`).

    Args:
        node: a call of a registry op that has a template.
        metas: body node -> `TensorMeta` or Python value (`value_metas`).
    """
    op = node.target
    names, options = template_names(op, node.args, node.kwargs)
    arg_metas = [metas[v] if is_node(v) else v for v in names.values()]
    dtype = compute_dtype(op, arg_metas, metas[node])
    promoted = set(list(names)[op.promote_from:]) if dtype is not None else set()
    operands = {key: (value, dtype if key in promoted else None) for key, value in names.items()}
    operands.update({key: (value, dtype) for key, value in options.items()})
    template = op.kernel_template(getattr(metas[node], "dtype", None))
    text = template(**options) if callable(template) else template
    return TemplateCall(ast.parse(text, mode="eval").body, operands, dtype, metas[node])
