"""Row kernels in CUDA: elementwise prologue, a reduction over the trailing dims, elementwise epilogue.

A row group (`fxkit.backends.fuse_rows.FuseRows`: one softmax, log_softmax or
layer_norm over its input's last dimension(s), the elementwise ops computing
that input and those applied to its result) becomes one kernel with a block
a row (grid-stride over rows). The block's threads stride over the row three
times, recomputing the prologue from the inputs each time (cheaper than a
scratch row in global memory: the row stays in L1/L2), and combine their
partial results with `fx_block_max_*`/`fx_block_sum_*` (warp shuffles)::

    __shared__ float partial[32];
    for (int r = blockIdx.x; r < 4096; r += gridDim.x) {
        float m = -fx_inf_f();
        for (int j = threadIdx.x; j < 1024; j += blockDim.x) {
            <loads, prologue at (r, j)>
            m = fmaxf(m, v);
        }
        m = fx_block_max_f(m, partial);
        float s = 0.0f;
        for (...) { <prologue>; s += expf(v - m); }
        s = fx_block_sum_f(s, partial);
        for (...) { <prologue>; const float softmax = expf(v - m) / s; <epilogue>; out0[r * 1024 + j] = ...; }
    }

The statistics follow the eager implementations' formulas and order:
``exp(x - max) / sum``, ``(x - max) - log(sum)``, ``(x - mean) * (1 / sqrt(var
+ eps)) * weight + bias`` with the biased variance of the centred values. The
maximum skips NaN (``fmaxf``) but a NaN still makes its row's sum NaN, so the
whole row is NaN as in eager mode. Operands must be C-contiguous (callers
copy others) and, over the row dimensions, full or broadcast (a value a row).
"""
import math

from fxkit.codegen.block import CodeBlock
from fxkit.codegen.cuda_expr import MUL, RESERVED, CudaEmitter, Helpers, ctype, literal
from fxkit.codegen.cuda_kernel import (CudaKernelSource, assemble, body_parts, bind_inputs, contiguous_offset,
                                       decompose, index_type, int_literal, kernel_header, parameters, store)
from fxkit.codegen.namespace import Namespace
from fxkit.codegen.numba_kernel import collapse, is_full
from fxkit.codegen.numba_reduction import ROW_OPS, row_layout, row_node
from fxkit.errors import LoweringError
from fxkit.runtime.meta import TensorMeta

_FLOATS = ("float32", "float64")
BLOCK_MAX = 256
"""Threads a row's block has at most (fewer for short rows, a multiple of 32)."""


def block_size(row_length):
    """Threads of the block computing one row of ``row_length`` elements."""
    return min(BLOCK_MAX, max(32, -(-row_length // 32) * 32))


def row_kernel(fused, args, names=None):
    """Generate the row kernel of a `FusedOp` holding one row op (see the module docstring).

    Args:
        fused: the `FusedOp`.
        args: per input, a `TensorMeta` or the Python value it receives.
        names: the graph's names of the inputs, for the leading comment.

    Returns:
        A contiguous-only `CudaKernelSource` (``kernel(out0, ..., x0, ...)``, a block a row).

    Raises:
        LoweringError: the group is no row kernel (no single row op, an operand
            mixing full and broadcast row dims, an output of another shape, ...).
    """
    graph, metas, placeholders, results = body_parts(fused, args)
    row = row_node(graph)
    if row is None:
        raise LoweringError(f"{fused.name}: a row kernel needs exactly one of {', '.join(o.name for o in ROW_OPS)}")
    source = metas[row.args[0]]
    shape = tuple(source.shape)
    k = ROW_OPS[row.target].row_dims(row, source)
    dtype = metas[row].dtype
    arrays = [n for n in placeholders if isinstance(metas[n], TensorMeta)]
    problem = _check(row, k, dtype, source, shape, results, arrays, metas)
    if problem:
        raise LoweringError(f"{fused.name}: no row kernel: {problem}")
    calls = [n for n in graph.nodes if n.op == "call"]
    prologue, epilogue = calls[:calls.index(row)], calls[calls.index(row) + 1:]
    helpers = Helpers()
    rows = math.prod(shape[:len(shape) - k])
    length = math.prod(shape[len(shape) - k:])
    entry = _entry(graph, metas, placeholders, results, row, k, shape, dtype, prologue, epilogue, helpers)
    inputs = tuple(metas[n] if isinstance(metas[n], TensorMeta) else type(metas[n]) for n in placeholders)
    return CudaKernelSource(assemble(helpers, [entry]), kernel_header(fused, placeholders, names, metas), inputs,
                            tuple(metas[r] for r in results), rows, length, False)


def _check(row, k, dtype, source, shape, results, arrays, metas):
    if k is None:
        return f"{row.format_node()} does not reduce over the last dimension(s)"
    if dtype.name not in _FLOATS or source.dtype is not dtype:
        return f"the row op computes in {dtype.name}; row kernels take float32 and float64"
    if any(tuple(metas[r].shape) != shape for r in results):
        return "an output does not have the row op's shape"
    if not row_layout(shape, k, [metas[n].shape for n in arrays]):
        return "an operand is full in some row dimensions and broadcast in others"
    return None


def _entry(graph, metas, placeholders, results, row, k, shape, dtype, prologue, epilogue, helpers):
    block = CodeBlock()
    namespace = Namespace(RESERVED)
    outs, params, declarations = parameters(namespace, placeholders, metas, results)
    operands = [(o, metas[r].shape) for o, r in zip(outs, results)]
    operands += [(p, metas[n].shape) for p, n in zip(params, placeholders) if isinstance(metas[n], TensorMeta)]
    outer = shape[:len(shape) - k]
    groups = [g for g in collapse(outer, [_aligned(s, shape)[:len(outer)] for _, s in operands]) if g]
    extents = [math.prod(outer[d] for d in dims) for dims in groups]
    rows, length = math.prod(outer), math.prod(shape[len(outer):])
    itype = index_type(rows * max(length, 1))
    r, j = namespace.create_name("r"), namespace.create_name("j")
    indices = [namespace.create_name(f"r{g}") for g in range(len(groups))]
    row_dims = list(range(len(outer), len(shape)))
    offsets, used = {}, set()
    for name, s in operands:
        spans = [g for g, dims in enumerate(groups) if is_full(shape, s, dims)]
        outer_offset = contiguous_offset(spans, extents, indices, r) if spans else ""
        used.update(spans if len(spans) != len(groups) else ())
        if any(is_full(shape, s, [d]) for d in row_dims):
            offsets[name] = f"{outer_offset} * {length} + {j}" if outer_offset else j
        else:
            offsets[name] = outer_offset or "0"
    t = ctype(dtype)
    partial = namespace.create_name("partial")
    stats = _Statistics(namespace, helpers, dtype, row, partial, length)
    with block.indent(f'extern "C" __global__ void kernel({", ".join(declarations)}) {{'):
        block.line(f"__shared__ {t} {partial}[32];")
        with block.indent(f"for ({itype} {r} = blockIdx.x; {r} < {int_literal(rows, itype)}; {r} += gridDim.x) {{"):
            decompose(block, itype, r, extents, indices, used)
            passes = stats.passes()
            for number, (before, accumulate, after) in enumerate(passes):
                last = number == len(passes) - 1
                for line in before:
                    block.line(line)
                loop = (f"for ({itype} {j} = threadIdx.x; {j} < {int_literal(length, itype)}; "
                        f"{j} += blockDim.x) {{")
                with block.indent(loop):
                    emitter = CudaEmitter(namespace.copy(), metas, helpers)
                    needed = _reads(prologue + [row] + epilogue) if last else _reads(prologue) | {row.args[0]}
                    bind_inputs(block, emitter, placeholders, params, metas, offsets, needed)
                    for node in prologue:
                        emitter.emit(block, node)
                    value = emitter.operand(row.args[0], dtype).text
                    if last:
                        local = emitter.namespace.create_name(row.target.name)
                        block.line(f"const {t} {local} = {stats.normalized(value, emitter)};")
                        emitter.bind(row, local, dtype)
                        for node in epilogue:
                            emitter.emit(block, node)
                        for out, node in zip(outs, results):
                            store(block, emitter, out, offsets[out], node, metas[node])
                    else:
                        block.lines(accumulate(value))
                block.line("}")
                for line in after:
                    block.line(line)
        block.line("}")
    block.line("}")
    return block


def _aligned(operand_shape, shape):
    return (1,) * (len(shape) - len(operand_shape)) + tuple(operand_shape)


def _reads(nodes):
    return {used for node in nodes for used in node.all_input_nodes}


class _Statistics:
    """The row statistics of softmax, log_softmax and layer_norm: the passes over a row and the result."""

    def __init__(self, namespace, helpers, dtype, row, partial, length):
        self.names = namespace
        self.helpers = helpers
        self.dtype = dtype
        self.row = row
        self.partial = partial
        self.length = length
        self.kind = "f" if dtype.name == "float32" else "d"
        self.t = ctype(dtype)
        self.m = "f" if self.kind == "f" else ""

    def _const(self, value):
        return literal(float(value), self.dtype, self.helpers).text

    def _reduce(self, how, local):
        return f"{local} = {self.helpers.use(f'fx_block_{how}_{self.kind}')}({local}, {self.partial});"

    def passes(self):
        """Per pass over the row: (lines before the loop, the accumulating line of a value, lines after)."""
        t, names = self.t, self.names
        if self.row.target.name == "layer_norm":
            s, q, d = names.create_name("s"), names.create_name("q"), names.create_name("d")
            self.mean, self.rstd = names.create_name("mean"), names.create_name("rstd")
            n = self._const(self.length)
            eps = self._const(self.row.target.bind(self.row.args, self.row.kwargs)["eps"])
            one = self._const(1)
            return [
                ([f"{t} {s} = {self._const(0)};"], lambda v: [f"{s} += {v};"],
                 [self._reduce("sum", s), f"const {t} {self.mean} = {s} / {n};"]),
                ([f"{t} {q} = {self._const(0)};"],
                 lambda v: [f"const {t} {d} = {v} - {self.mean};", f"{q} += {d} * {d};"],
                 [self._reduce("sum", q), f"const {t} {self.rstd} = {one} / sqrt{self.m}({q} / {n} + {eps});"]),
                ([], None, []),
            ]
        self.max, self.sum = names.create_name("m"), names.create_name("s")
        inf = self.helpers.use(f"fx_inf_{self.kind}")
        after = [self._reduce("sum", self.sum)]
        if self.row.target.name == "log_softmax":
            self.lse = names.create_name("lse")
            after.append(f"const {t} {self.lse} = log{self.m}({self.sum});")
        return [
            ([f"{t} {self.max} = -{inf}();"], lambda v: [f"{self.max} = fmax{self.m}({self.max}, {v});"],
             [self._reduce("max", self.max)]),
            ([f"{t} {self.sum} = {self._const(0)};"],
             lambda v: [f"{self.sum} += exp{self.m}({v} - {self.max});"], after),
            ([], None, []),
        ]

    def normalized(self, value, emitter):
        """The row op's result for the row value ``value`` (a C expression)."""
        name = self.row.target.name
        if name == "softmax":
            return f"exp{self.m}({value} - {self.max}) / {self.sum}"
        if name == "log_softmax":
            return f"({value} - {self.max}) - {self.lse}"
        args = self.row.target.bind(self.row.args, self.row.kwargs)
        text = f"({value} - {self.mean}) * {self.rstd}"
        if args["weight"] is not None:
            text = f"{text} * {emitter.operand(args['weight'], self.dtype).at(MUL)}"
        if args["bias"] is not None:
            text = f"{text} + {emitter.operand(args['bias'], self.dtype).at(MUL)}"
        return text
