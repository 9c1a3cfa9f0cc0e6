"""A `FusedOp` body -> the source of one ``@numba.njit`` loop nest.

Every elementwise op's registry ``template`` (a Python expression over ``a, b,
c`` and the op's defaulted keyword names, calling the intrinsics of
``fxkit.runtime.ops.intrinsics``) is translated into scalar numba code: one
statement a node, inputs cast to the dtype the op computes in (its PyTorch
promotion, as eager's ``Op.run`` casts arrays), constants typed in that dtype
(numba would otherwise widen ``float32 * 0.5`` to float64), and the result
cast to the node's dtype. The seed's ``x = x * x`` ten times becomes::

    # fused_0: x0 = %x
    #   mul = mul(x, x) ... mul_9 = mul(mul_8, mul_8)
    @numba.njit(cache=True, parallel=True, error_model="numpy", nogil=True)
    def kernel(out0, x0):
        ...
                    x0_1 = x0_v[i0]
                    mul = np.float32(x0_1 * x0_1)
                    ...
                    out0_v[i0] = mul_9

Two entry points share the body. ``kernel`` takes C-contiguous arrays and
collapses the loop nest: adjacent dimensions in which every operand is either
full or broadcast merge, so most kernels are one flat loop and a bias add is
two (rows, columns) with the bias read at ``[0, i1]``. ``kernel_strided``
takes any strides (transposes, slices, zero-stride broadcasts) and loops over
every dimension of the result. A result of at least `PARALLEL_MIN`
elements gets ``numba.prange`` over the outer dimensions and blocks of the
innermost one (``parallel=True``); a smaller one a plain loop nest, which
compiles three times faster and skips the thread-pool launch (~10 µs).
Shapes are fixed per specialisation, so the choice is made here.

Generated names are canonical (inputs ``x0, x1, ...``, locals named after
their ops): two groups computing the same thing share one source, so one
compiled kernel. The leading comment maps them back to the graph's nodes.
This module only writes text; `fxkit.backends.numba_backend` compiles it.
"""
import ast
import inspect
import math
from typing import NamedTuple

from fxkit.codegen.block import CodeBlock
from fxkit.codegen.namespace import Namespace
from fxkit.errors import LoweringError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.op import Op

PARALLEL_MIN = 1 << 16
"""Results with fewer elements run serially: numba's thread launch costs ~10 µs."""
BLOCK = 8192
"""Elements of the innermost dimension a parallel task computes (a contiguous, vectorised run)."""

SUPPORTED_DTYPES = frozenset(("float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"))
_LOAD = ast.Load()
_INPUT_NAMES = ("a", "b", "c")

def jit_decorator(parallel):
    """The decorator line of a kernel: cached on disk, numpy's division semantics, no GIL."""
    return f'@numba.njit(cache=True, error_model="numpy", nogil=True{", parallel=True" if parallel else ""})'


def parallel_for(shape):
    """Whether a kernel over ``shape`` runs on numba's thread pool (`PARALLEL_MIN` elements or more)."""
    return math.prod(shape) >= PARALLEL_MIN

HEADER = ("import math", "", "import numba", "import numpy as np", "",
          "from fxkit.backends.numba_math import erf32, exp32, maximum, minimum, tanh32")
# Names the module header binds: never handed out for locals.
RESERVED = ("math", "numba", "np", "erf32", "exp32", "maximum", "minimum", "tanh32", "kernel", "kernel_strided",
            "range", "min", "max", "abs", "bool")
_MATH = {"log": "log", "log1p": "log1p", "expm1": "expm1", "sqrt": "sqrt", "sin": "sin", "cos": "cos",
         "exp": "exp", "tanh": "tanh", "erf": "erf"}
_FLOAT32_FAST = {"exp": "exp32", "tanh": "tanh32", "erf": "erf32"}
_ROUNDING = ("floor", "ceil", "rint", "trunc")
_LOGICAL = {"logical_and": ast.BitAnd, "logical_or": ast.BitOr, "logical_xor": ast.BitXor}
_OPERATORS = {"floor_divide": ast.FloorDiv, "remainder": ast.Mod, "pow": ast.Pow}


class KernelSource(NamedTuple):
    """A generated kernel module and what calling it needs.

    Attributes:
        source: the module text (canonical: what is compiled and cached).
        header: the comment mapping its names to graph nodes (shown, not compiled).
        inputs: per kernel input, the `TensorMeta` of an array or the Python type of a scalar.
        outputs: the `TensorMeta` of each output, in the fused op's result order.
        contiguous_only: True when only ``kernel`` exists (callers make inputs contiguous).
    """

    source: str
    header: str
    inputs: tuple
    outputs: tuple
    contiguous_only: bool = False

    @property
    def text(self):
        """What a user reads: the node comment, then the module."""
        return self.header + self.source


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
    if type(value) in (tuple, list):
        return type(value)(_resolve(v, env) for v in value)
    if type(value) is dict:
        return {k: _resolve(v, env) for k, v in value.items()}
    return env[value] if hasattr(value, "op") and hasattr(value, "users") else value


def unsupported(metas):
    """Why numba cannot compile values of these metas, or None when it can."""
    for meta in metas:
        if isinstance(meta, TensorMeta):
            if meta.dtype.name not in SUPPORTED_DTYPES:
                return f"numba has no {meta.dtype.name} arrays"
            if meta.device.type != "cpu":
                return f"numba kernels run on the CPU, not {meta.device}"
            if not all(type(d) is int for d in meta.shape):
                return f"shape {meta.shape} is not concrete"
        elif type(meta) not in (int, float, bool):
            return f"a {type(meta).__name__} input"
    return None


# -- scalar code from templates -----------------------------------------------------------------
def np_attr(name):
    return ast.Attribute(ast.Name("np", _LOAD), name, _LOAD)


def cast(expr, dtype):
    """``np.<dtype>(expr)``: numba's scalar conversion (truncating, like numpy's astype)."""
    return ast.Call(np_attr("bool_" if dtype.name == "bool" else dtype.name), [expr], [])


def typed_constant(value, dtype):
    """A Python number as a literal of ``dtype`` (None: left as Python writes it)."""
    if dtype is None or type(value) not in (int, float, bool):
        return ast.Constant(value)
    if dtype.name == "bool":
        return ast.Constant(bool(value))
    if not dtype.is_floating_point and not (type(value) is float and value != int(value)):
        return cast(ast.Constant(int(value)), dtype)
    number = float(value)
    if number != number:
        literal = np_attr("nan")
    elif number in (float("inf"), float("-inf")):
        literal = np_attr("inf") if number > 0 else ast.UnaryOp(ast.USub(), np_attr("inf"))
    else:
        literal = ast.Constant(number)
    return cast(literal, dtype) if dtype.is_floating_point else literal


class _Template(ast.NodeTransformer):
    """Rewrite a template's AST into numba scalar code over given input expressions."""

    def __init__(self, names, dtype):
        self.names = names      # template name -> ast expression
        self.dtype = dtype      # the compute dtype, or None (inputs as they are)

    def visit_Name(self, node):
        return self.names[node.id]

    def visit_Constant(self, node):
        return typed_constant(node.value, self.dtype)

    def visit_Call(self, node):
        args = [self.visit(a) for a in node.args]
        name = node.func.id
        dtype = self.dtype
        floating = dtype is not None and dtype.is_floating_point
        if name in _MATH:
            if floating and dtype.name == "float32" and name in _FLOAT32_FAST:
                return ast.Call(ast.Name(_FLOAT32_FAST[name], _LOAD), args, [])
            return ast.Call(ast.Attribute(ast.Name("math", _LOAD), _MATH[name], _LOAD), args, [])
        if name in _ROUNDING:
            return ast.Call(np_attr(name), args, []) if floating else args[0]
        if name == "abs":
            return ast.Call(ast.Name("abs", _LOAD), args, [])
        if name == "isnan":
            return (ast.Compare(args[0], [ast.NotEq()], [args[0]]) if floating or dtype is None
                    else ast.Constant(False))
        if name == "where":
            return ast.IfExp(args[0], args[1], args[2])
        if name in ("maximum", "minimum"):
            return ast.Call(ast.Name(name, _LOAD), args, [])
        if name == "logical_not":
            return ast.Compare(args[0], [ast.Eq()], [ast.Constant(0)])
        if name in _LOGICAL:
            truth = [ast.Compare(a, [ast.NotEq()], [ast.Constant(0)]) for a in args]
            return ast.BinOp(truth[0], _LOGICAL[name](), truth[1])
        if name in _OPERATORS:
            return ast.BinOp(args[0], _OPERATORS[name](), args[1])
        raise LoweringError(f"numba kernels: no translation for the intrinsic {name!r}; add one to "
                            f"fxkit/codegen/numba_kernel.py when adding it to ops/intrinsics.py")


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


_SIGNATURES = {}


def template_names(op, args, kwargs):
    """``({template name: argument}, {option name: value})`` of one call, as tests/runtime/test_templates binds."""
    signature = _SIGNATURES.get(op)
    if signature is None:
        signature = _SIGNATURES[op] = inspect.signature(op.impl)
    bound = signature.bind(None, *args, **kwargs)
    bound.apply_defaults()
    params = list(signature.parameters.values())[1:]
    inputs = [p.name for p in params if p.default is inspect.Parameter.empty]
    names = {_INPUT_NAMES[i]: bound.arguments[p] for i, p in enumerate(inputs)}
    options = {p.name: bound.arguments[p.name] for p in params if p.default is not inspect.Parameter.empty}
    return names, options


class ScalarEmitter:
    """Emits one statement a body node into a `CodeBlock`, tracking each value's local and dtype.

    Args:
        namespace: the kernel's `Namespace`.
        metas: node -> `TensorMeta` (or Python value), from `value_metas`.
    """

    def __init__(self, namespace, metas):
        self.namespace = namespace
        self.metas = metas
        self.values = {}    # node -> ast expression of its scalar value

    def bind(self, node, expr):
        """Make ``expr`` the scalar value of ``node`` (an input load, a scalar parameter)."""
        self.values[node] = expr

    def emit(self, block, node):
        """Append ``<local> = <cast>(<translated template>)`` for the call ``node``."""
        op = node.target
        if not isinstance(op, Op) or op.template is None:
            raise LoweringError(f"numba kernels: {node.format_node()} has no kernel template")
        names, options = template_names(op, node.args, node.kwargs)
        metas = [self._meta(v) for v in names.values()]
        dtype = compute_dtype(op, metas, self.metas[node])
        promoted = set(list(names)[op.promote_from:]) if dtype is not None else set()
        exprs = {}
        for key, value in names.items():
            exprs[key] = self.operand(value, dtype if key in promoted else None)
        for key, value in options.items():
            exprs[key] = self.operand(value, dtype)
        template = op.template(**options) if callable(op.template) else op.template
        tree = ast.parse(template, mode="eval").body
        expr = _Template(exprs, dtype).visit(tree)
        result = self.metas[node]
        local = self.namespace.create_name(op.name)
        block.line(f"{local} = {ast.unparse(cast(expr, result.dtype))}")
        self.values[node] = ast.Name(local, _LOAD)
        return local

    def operand(self, value, dtype):
        """The expression of an argument, converted to ``dtype`` when given."""
        if _is_node(value):
            expr = self.values[value]
            meta = self.metas[value]
            if dtype is None:
                return expr
            if isinstance(meta, TensorMeta) and meta.dtype is dtype:
                return expr
            return cast(expr, dtype)
        return typed_constant(value, dtype)

    def _meta(self, value):
        return self.metas[value] if _is_node(value) else value


def _is_node(value):
    return hasattr(value, "op") and hasattr(value, "users")



# -- loops ----------------------------------------------------------------------------------------
def emit_loop_nest(block, namespace, extents, body, parallel):
    """The loop nest over ``extents`` (local names), with ``body(block, indices)`` innermost.

    Parallel: one ``prange`` over the outer indices and `BLOCK`-sized runs of
    the innermost one (each task a contiguous, vectorised run). Serial: plain
    nested loops.
    """
    indices = [namespace.create_name(f"i{d}") for d in range(len(extents))]
    if not parallel:
        _serial(block, indices, extents, body)
        return
    blocks, task, rest, start = (namespace.create_name(n) for n in ("blocks", "task", "rest", "start"))
    inner = extents[-1]
    block.line(f"{blocks} = ({inner} + {BLOCK - 1}) // {BLOCK}")
    with block.indent(f"for {task} in numba.prange({' * '.join([*extents[:-1], blocks])}):"):
        block.line(f"{start} = ({task} % {blocks}) * {BLOCK}")
        if len(extents) > 1:
            block.line(f"{rest} = {task} // {blocks}")
            for d in range(len(extents) - 2, 0, -1):
                block.line(f"{indices[d]} = {rest} % {extents[d]}")
                block.line(f"{rest} = {rest} // {extents[d]}")
            block.line(f"{indices[0]} = {rest}")
        with block.indent(f"for {indices[-1]} in range({start}, min({start} + {BLOCK}, {inner})):"):
            body(block, indices)


def _serial(block, indices, extents, body):
    if not extents:
        body(block, indices)
        return
    with block.indent(f"for {indices[-len(extents)]} in range({extents[0]}):"):
        _serial(block, indices, extents[1:], body)


def collapse(shape, operand_shapes):
    """Group the dimensions of ``shape`` that a contiguous loop nest iterates as one.

    Dimensions of extent 1 are dropped; adjacent ones merge when every
    operand is full in both or broadcast (extent 1) in both. Returns a
    non-empty list of groups of dimension positions (``[[]]`` for no loop).
    """
    rank = len(shape)
    aligned = [(1,) * (rank - len(s)) + tuple(s) for s in operand_shapes]
    groups = []
    previous = None
    for d in range(rank):
        if shape[d] == 1:
            continue
        pattern = tuple(s[d] != 1 for s in aligned)
        if groups and pattern == previous:
            groups[-1].append(d)
        else:
            groups.append([d])
        previous = pattern
    return groups or [[]]


def is_full(shape, operand_shape, dims):
    """Whether ``operand_shape``, right-aligned to ``shape``, spans the dimensions ``dims``."""
    offset = len(shape) - len(operand_shape)
    return bool(dims) and all(d >= offset and operand_shape[d - offset] != 1 for d in dims)


def group_extents(block, namespace, shape, groups, operands):
    """``n<g> = ...`` for each group, read from the shapes of operands spanning it (no constants:
    one source serves every shape with the same broadcast pattern). Returns the local names."""
    extents = []
    for g, dims in enumerate(groups):
        factors = []
        for d in dims:
            name, operand_shape = next((n, s) for n, s in operands if is_full(shape, s, [d]))
            factors.append(f"{name}.shape[{d - (len(shape) - len(operand_shape))}]")
        extent = namespace.create_name(f"n{g}")
        block.line(f"{extent} = {' * '.join(factors) or '1'}")
        extents.append(extent)
    return extents


def contiguous_views(block, namespace, shape, groups, extents, operands):
    """``<name>_v = <name>.reshape(...)`` collapsing each C-contiguous operand onto the groups."""
    views = {}
    for name, operand_shape in operands:
        view_shape = [e if is_full(shape, operand_shape, dims) else "1" for e, dims in zip(extents, groups)]
        views[name] = namespace.create_name(f"{name}_v")
        block.line(f"{views[name]} = {name}.reshape(({', '.join(view_shape)}{',' if len(view_shape) == 1 else ''}))")
    return views


def element_index(shape, operand_shape, groups, indices, strided):
    """The subscript reading an operand at the loop's position (``0`` where it broadcasts)."""
    if not strided:
        return ", ".join(i if is_full(shape, operand_shape, dims) else "0" for i, dims in zip(indices, groups))
    if not operand_shape:
        return "()"
    offset = len(shape) - len(operand_shape)
    by_dim = {dims[0]: i for i, dims in zip(indices, groups) if dims}
    return ", ".join("0" if extent == 1 else by_dim[k + offset] for k, extent in enumerate(operand_shape))


# -- elementwise kernels --------------------------------------------------------------------------
def elementwise_kernel(fused, args, names=None):
    """Generate the kernel module of a `FusedOp` of elementwise ops.

    Args:
        fused: the `FusedOp` (its ``graph`` holds placeholders, calls and an output).
        args: per input, a `TensorMeta` or the Python value it receives.
        names: the graph's names of the inputs, for the leading comment.

    Returns:
        A `KernelSource` with entry points ``kernel`` and ``kernel_strided``, each
        called as ``kernel(out0, ..., x0, ...)`` with preallocated outputs.
    """
    graph = fused.graph
    metas = value_metas(graph, args)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    result = graph.output_node().args[0]
    results = list(result) if type(result) is tuple else [result]
    shape = broadcast_shapes(*(metas[r].shape for r in results),
                             *(metas[n].shape for n in placeholders if isinstance(metas[n], TensorMeta)))
    module = CodeBlock()
    module.lines(HEADER)
    for strided in (False, True):
        module.lines(["", ""])
        _elementwise_function(module, graph, metas, placeholders, results, shape, strided)
    inputs = tuple(metas[n] if isinstance(metas[n], TensorMeta) else type(metas[n]) for n in placeholders)
    header = kernel_header(fused, placeholders, names)
    return KernelSource(str(module), header, inputs, tuple(metas[r] for r in results))


def _elementwise_function(module, graph, metas, placeholders, results, shape, strided):
    namespace = Namespace(RESERVED)
    params = [namespace.create_name(f"x{i}") for i in range(len(placeholders))]
    outs = [namespace.create_name(f"out{i}") for i in range(len(results))]
    operands = [(outs[i], metas[r].shape) for i, r in enumerate(results)]
    operands += [(params[i], metas[n].shape) for i, n in enumerate(placeholders) if isinstance(metas[n], TensorMeta)]
    parallel = parallel_for(shape)
    module.line(jit_decorator(parallel))
    with module.indent(f"def {'kernel_strided' if strided else 'kernel'}({', '.join(outs + params)}):"):
        if strided:
            groups = [[d] for d in range(len(shape)) if shape[d] != 1] or [[]]
        else:
            groups = collapse(shape, [s for _, s in operands])
        extents = group_extents(module, namespace, shape, groups, operands)
        if strided:
            views = {name: name for name, _ in operands}
        else:
            views = contiguous_views(module, namespace, shape, groups, extents, operands)
        emitter = ScalarEmitter(namespace, metas)
        arrays = {}
        for i, node in enumerate(placeholders):
            if isinstance(metas[node], TensorMeta):
                arrays[node] = params[i]
            else:
                emitter.bind(node, ast.Name(params[i], _LOAD))

        def body(block, indices):
            emitter.namespace = names = namespace
            for node, param in arrays.items():
                local = names.create_name(param)
                index = element_index(shape, metas[node].shape, groups, indices, strided)
                block.line(f"{local} = {views[param]}[{index}]")
                emitter.bind(node, ast.Name(local, _LOAD))
            for node in graph.nodes:
                if node.op == "call":
                    emitter.emit(block, node)
            for out, node in zip(outs, results):
                index = element_index(shape, metas[node].shape, groups, indices, strided)
                block.line(f"{views[out]}[{index}] = {ast.unparse(emitter.values[node])}")

        emit_loop_nest(module, namespace, extents, body, parallel)


def kernel_header(fused, placeholders, names):
    """The leading comment: the kernel's inputs as graph values, and the nodes it fuses."""
    lines = [f"# {fused.name}"]
    sources = names or [p.name for p in placeholders]
    lines.append("#   inputs: " + ", ".join(f"x{i} = %{s}" for i, s in enumerate(sources)))
    for node in fused.graph.nodes:
        if node.op == "call":
            lines.append(f"#   {node.format_node()}")
    return "\n".join(lines) + "\n"
