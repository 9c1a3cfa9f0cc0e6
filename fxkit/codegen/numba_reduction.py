"""Row kernels: elementwise prologue, a reduction over the trailing dims, elementwise epilogue.

A row group (see `fxkit.backends.fuse_rows`) is a `FusedOp` whose body holds
one softmax, log_softmax or layer_norm over its input's last dimension(s),
the elementwise ops computing that input, and the elementwise ops applied to
its result. It becomes one ``@numba.njit`` kernel: rows run in parallel,
each row is computed into a scratch buffer by the prologue, reduced (the
vectorised row helpers of `fxkit.backends.numba_math`), and normalised, with the
epilogue applied as each output element is written::

    def rows(out0, x0, ...):                 # a block of rows (one task when run in parallel)
        buf = np.empty(n1, np.float32)
        for i0 in range(n0):
            for j in range(n1):
                buf[j] = <prologue at (i0, j)>
            m = row_max(buf)
            total = np.float32(0.0)
            for j_1 in range(buf.size):
                e = exp_nonpositive32(buf[j_1] - m)
                buf[j_1] = e
                total = accumulate(total, e)
            s = np.float32(1.0) / total
            for j in range(n1):
                softmax = np.float32(buf[j] * s)
                out0[i0, j] = <epilogue of softmax at (i0, j)>

The statistics follow the eager implementations' formulas and order of
operations (``exp(x - max) / sum``, ``(x - max) - log(sum)``, ``(x - mean) *
(1 / sqrt(var + eps)) * weight + bias`` with the biased variance); softmax
multiplies by the sum's reciprocal where eager divides (within 1 ulp), and
sums run in SIMD partial sums. Each pass over a row is a contiguous loop
LLVM vectorises: the maximum and layer_norm's sums are
`fxkit.backends.numba_math` loops; softmax sums its exponentials as it makes
them (`accumulate`), and log_softmax keeps none of them, recomputing ``x -
max`` in its last pass. ``buf`` is allocated once a block of rows, not a row, and only
where a prologue fills it or softmax keeps its exponentials in it.
Operands must be C-contiguous (callers copy others) and, over the row
dimensions, either full or broadcast (one value a row); other groups are
left to the elementwise kernels and numpy.
The loops over rows are a function of their own, called on slices of rows
by the parallel entry, for the reason `fxkit.codegen.numba_kernel` gives.
"""
import ast

from fxkit.codegen.block import CodeBlock
from fxkit.codegen.namespace import Namespace
from fxkit.codegen.numba_kernel import (HEADER, RESERVED, KernelSource, collapse, contiguous_views, element_index,
                                        emit_launch, emit_nest, function_namespace, group_extents, jit_decorator,
                                        kernel_header, parallel_for, view_loops, view_shapes)
from fxkit.codegen.numba_scalar import ScalarEmitter, cast, typed_constant, value_metas
from fxkit.errors import LoweringError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op

_LOAD = ast.Load()
_ROW_HELPERS = ("accumulate", "exp_nonpositive32", "row_max", "row_sum", "row_sum_squares")
_ROW_HEADER = HEADER + (f"from fxkit.backends.numba_math import {', '.join(_ROW_HELPERS)}",)
_ROW_RESERVED = RESERVED + _ROW_HELPERS
_FLOATS = ("float32", "float64")


class _Softmax:
    """``exp(x - max) / sum(exp(x - max))`` over the last dimension."""

    log = False

    @property
    def writes_scratch(self):
        """Whether `emit` keeps values in ``buf`` (softmax keeps its exponentials)."""
        return not self.log

    def row_dims(self, node, input_meta):
        args = node.target.bind(node.args, node.kwargs)
        rank = len(input_meta.shape)
        dim = args["dim"]
        if rank == 0 or args["dtype"] is not None or type(dim) is not int or dim not in (-1, rank - 1):
            return None
        return 1

    def operands(self, node):
        return ()

    def emit(self, block, names, row, buf, dtype, node, emitter):
        """Statistics of the row values ``row`` (a 1-d array: an input's row, or a buffer
        filled by the prologue); returns a function of ``j`` giving the op's value there.
        ``buf`` is scratch space of the row's length (maybe ``row`` itself)."""
        m, total, s = names.create_name("m"), names.create_name("total"), names.create_name("s")
        j, e = names.create_name("j"), names.create_name("e")
        # NOTE: x - max is <= 0 or NaN, so the exponential needs one clamp (see numba_math).
        exp = "exp_nonpositive32" if dtype.name == "float32" else "math.exp"
        block.line(f"{m} = row_max({row})")
        block.line(f"{total} = {ast.unparse(typed_constant(0, dtype))}")
        # NOTE: the exponentials are summed as they are made (SIMD partial sums), not in a pass of their own;
        # softmax keeps them for its last pass, log_softmax needs only their sum.
        with block.indent(f"for {j} in range({row}.size):"):
            block.line(f"{e} = {exp}({row}[{j}] - {m})")
            if not self.log:
                block.line(f"{buf}[{j}] = {e}")
            block.line(f"{total} = accumulate({total}, {e})")
        if self.log:
            # NOTE: the shifted row is recomputed where it is the result's first term: as eager, in its dtype.
            block.line(f"{s} = np.{dtype.name}(math.log({total}))")
            return lambda j: f"({row}[{j}] - {m}) - {s}"
        # NOTE: one reciprocal a row and a multiply an element (eager divides: within 1 ulp).
        block.line(f"{s} = {ast.unparse(typed_constant(1, dtype))} / {total}")
        return lambda j: f"{buf}[{j}] * {s}"


class _LogSoftmax(_Softmax):
    """``(x - max) - log(sum(exp(x - max)))`` over the last dimension."""

    log = True


class _LayerNorm:
    """``(x - mean) * (1 / sqrt(var + eps)) * weight + bias`` over the trailing ``normalized_shape``."""

    writes_scratch = False

    def row_dims(self, node, input_meta):
        args = node.target.bind(node.args, node.kwargs)
        shape = args["normalized_shape"]
        shape = (shape,) if type(shape) is int else tuple(shape)
        if not shape or len(shape) > len(input_meta.shape) or type(args["eps"]) not in (int, float):
            return None
        return len(shape)

    def operands(self, node):
        args = node.target.bind(node.args, node.kwargs)
        return tuple(args[k] for k in ("weight", "bias") if args[k] is not None)

    def emit(self, block, names, row, buf, dtype, node, emitter):
        args = node.target.bind(node.args, node.kwargs)
        mean, rstd = names.create_name("mean"), names.create_name("rstd")
        eps = ast.unparse(typed_constant(args["eps"], dtype))
        one = ast.unparse(typed_constant(1, dtype))
        size = f"np.{dtype.name}({row}.size)"  # NOTE: numba widens float32 / int64 to float64
        block.line(f"{mean} = row_sum({row}) / {size}")
        block.line(f"{rstd} = {one} / math.sqrt(row_sum_squares({row}, {mean}) / {size} + {eps})")
        weight, bias = args["weight"], args["bias"]

        def value(j):
            text = f"({row}[{j}] - {mean}) * {rstd}"
            if weight is not None:
                text = f"{text} * {ast.unparse(emitter.values[weight])}"
            if bias is not None:
                text = f"{text} + {ast.unparse(emitter.values[bias])}"
            return text

        return value


ROW_OPS = {get_op("softmax"): _Softmax(), get_op("log_softmax"): _LogSoftmax(), get_op("layer_norm"): _LayerNorm()}
"""Registry op -> how a row kernel reduces and normalises it."""


def row_node(graph):
    """The one row-op call of a body, or None."""
    found = [n for n in graph.nodes if n.op == "call" and n.target in ROW_OPS]
    return found[0] if len(found) == 1 else None


def row_layout(shape, k, operand_shapes):
    """Whether every operand is full or broadcast over the last ``k`` dims of ``shape``."""
    for s in operand_shapes:
        aligned = (1,) * (len(shape) - len(s)) + tuple(s)
        row = [aligned[d] for d in range(len(shape) - k, len(shape)) if shape[d] != 1]
        if any(e == 1 for e in row) and any(e != 1 for e in row):
            return False
    return True


def row_kernel(fused, args, names=None, pool_shared=False):
    """Generate the row kernel of a `FusedOp` holding one row op (see the module docstring).

    Args:
        fused: the `FusedOp`.
        args: per input, a `TensorMeta` or the Python value it receives.
        names: the graph's names of the inputs, for the leading comment.
        pool_shared: whether numpy's BLAS runs on numba's threads (`parallel_for`).

    Returns:
        A `KernelSource` with the one entry point ``kernel(out0, ..., x0, ...)``, for
        C-contiguous arrays (`fxkit.backends.numba_launch.KernelCall` copies others).

    Raises:
        LoweringError: the group is no row kernel (an operand mixing full and
            broadcast row dims, an epilogue reading a prologue value, ...).
    """
    graph = fused.graph
    metas = value_metas(graph, args)
    row = row_node(graph)
    if row is None:
        raise LoweringError(f"{fused.name}: a row kernel needs exactly one of {', '.join(o.name for o in ROW_OPS)}")
    rule = ROW_OPS[row.target]
    shape = metas[row.args[0]].shape
    k = rule.row_dims(row, metas[row.args[0]])
    dtype = metas[row].dtype
    calls = [n for n in graph.nodes if n.op == "call"]
    prologue = calls[:calls.index(row)]
    epilogue = calls[calls.index(row) + 1:]
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    result = graph.output_node().args[0]
    results = list(result) if type(result) is tuple else [result]
    arrays = [n for n in placeholders if isinstance(metas[n], TensorMeta)]
    problem = _check(row, k, dtype, shape, prologue, epilogue, results, arrays, metas)
    if problem:
        raise LoweringError(f"{fused.name}: no row kernel: {problem}")
    module = CodeBlock()
    module.lines(_ROW_HEADER)
    module.lines(["", ""])
    _row_function(module, graph, metas, placeholders, results, row, rule, k, shape, dtype, prologue, epilogue,
                  pool_shared)
    inputs = tuple(metas[n] if isinstance(metas[n], TensorMeta) else type(metas[n]) for n in placeholders)
    header = kernel_header(fused, placeholders, names)
    return KernelSource(str(module), header, inputs, tuple(metas[r] for r in results), elementwise=False)


def _check(row, k, dtype, shape, prologue, epilogue, results, arrays, metas):
    if k is None:
        return f"{row.format_node()} does not reduce over the last dimension(s)"
    if dtype.name not in _FLOATS or metas[row.args[0]].dtype is not dtype:
        return f"the row op computes in {dtype.name}; row kernels take float32 and float64"
    inside = set(prologue)
    if any(used in inside for node in epilogue for used in node.all_input_nodes):
        return "an epilogue op reads a prologue value"
    if any(metas[r].shape != shape for r in results) or row in inside:
        return "an output does not have the row op's shape"
    if not row_layout(shape, k, [metas[n].shape for n in arrays]):
        return "an operand is full in some row dimensions and broadcast in others"
    return None


def _row_function(module, graph, metas, placeholders, results, row, rule, k, shape, dtype, prologue, epilogue,
                  pool_shared):
    namespace = Namespace(_ROW_RESERVED)
    params = [namespace.create_name(f"x{i}") for i in range(len(placeholders))]
    outs = [namespace.create_name(f"out{i}") for i in range(len(results))]
    operands = [(outs[i], metas[r].shape) for i, r in enumerate(results)]
    operands += [(params[i], metas[n].shape) for i, n in enumerate(placeholders) if isinstance(metas[n], TensorMeta)]
    # Outer dimensions collapse as in elementwise kernels (at least one group, for the row loop), the row dims
    # become one; the views are (outer groups..., row).
    groups = [g for g in collapse(shape[:len(shape) - k], [_outer(s, shape, k) for _, s in operands]) if g] or [[]]
    groups.append([d for d in range(len(shape) - k, len(shape)) if shape[d] != 1])
    views = view_shapes(shape, groups, operands)
    inner, inner_shape, inner_groups = view_loops(groups, views)
    module.line(jit_decorator(False))
    with module.indent(f"def rows({', '.join(outs + params)}):"):
        names = function_namespace(_ROW_RESERVED, outs + params)
        extents = group_extents(module, names, inner_shape, inner_groups, list(inner.items()))
        indices = [names.create_name(f"i{g}") for g in range(len(groups) - 1)] + [names.create_name("j")]
        emitter = ScalarEmitter(names, metas)
        arrays = {}
        for i, node in enumerate(placeholders):
            if isinstance(metas[node], TensorMeta):
                arrays[node] = params[i]
            else:
                emitter.bind(node, emitter.name(params[i]))
        source = row.args[0]
        # An input row read as it is (no prologue, no cast, not broadcast along the row) is reduced
        # where it lies; otherwise the prologue fills ``buf`` first.
        direct = (not prologue and source in arrays and metas[source].dtype is dtype
                  and inner[arrays[source]][-1] == 2)
        buf = names.create_name("buf")
        if not direct or rule.writes_scratch:
            module.line(f"{buf} = np.empty({extents[-1]}, np.{dtype.name})")

        def load(block, reads):
            """Each array placeholder in ``reads`` read at the loop's position, once."""
            for node in dict.fromkeys(reads):
                if node in arrays:
                    local = names.create_name(arrays[node])
                    index = element_index(inner_shape, inner[arrays[node]], inner_groups, indices, False)
                    block.line(f"{local} = {arrays[node]}[{index}]")
                    emitter.bind(node, emitter.name(local))


        def row_body(block):
            j = indices[-1]
            if direct:
                values = names.create_name("values")
                block.line(f"{values} = {arrays[source]}[{', '.join(_outer_index(inner[arrays[source]], indices))}]")
            else:
                values = buf
                with block.indent(f"for {j} in range({extents[-1]}):"):
                    load(block, _reads(prologue, row, rule, before=True))
                    for node in prologue:
                        emitter.emit(block, node)
                    block.line(f"{buf}[{j}] = {ast.unparse(emitter.operand(source, dtype))}")
            value = rule.emit(block, names, values, buf, dtype, row, emitter)
            with block.indent(f"for {j} in range({extents[-1]}):"):
                load(block, _reads(epilogue, row, rule, before=False))
                local = names.create_name(row.target.name)
                block.line(f"{local} = {ast.unparse(cast(ast.parse(value(j), mode='eval').body, dtype))}")
                emitter.bind(row, emitter.name(local))
                for node in epilogue:
                    emitter.emit(block, node)
                for out, node in zip(outs, results):
                    index = element_index(inner_shape, inner[out], inner_groups, indices, False)
                    block.line(f"{out}[{index}] = {emitter.text(node)}")

        emit_nest(module, indices[:-1], extents[:-1], row_body)
    module.lines(["", ""])
    parallel = parallel_for(shape, pool_shared=pool_shared) and bool(groups[0])
    module.line(jit_decorator(parallel))
    with module.indent(f"def kernel({', '.join(outs + params)}):"):
        extents = group_extents(module, namespace, shape, groups, operands)
        view_names = contiguous_views(module, namespace, extents, views)
        arguments = [view_names.get(name, name) for name in outs + params]
        split = {view_names[name]: 0 for name, dims in views.items() if dims[0] is None}
        emit_launch(module, namespace, "rows", arguments, split, extents, parallel)


def _outer_index(view, indices):
    """The indices selecting one row of a view: each outer index, or 0 where the view broadcasts."""
    return [i if extent == 2 else "0" for i, extent in zip(indices[:-1], view[:-1])]


def _outer(operand_shape, shape, k):
    aligned = (1,) * (len(shape) - len(operand_shape)) + tuple(operand_shape)
    return aligned[:len(shape) - k]


def _reads(nodes, row, rule, before):
    """The placeholders a loop reads: its nodes' inputs (and the row op's, before or after it)."""
    reads = [used for node in nodes for used in node.all_input_nodes]
    if before:
        reads.append(row.args[0])
    else:
        reads.extend(rule.operands(row))
    return reads
