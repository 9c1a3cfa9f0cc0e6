"""A `FusedOp` of elementwise ops -> the source of one CUDA kernel module (for ``cupy.RawModule``).

The statements come from the ops' templates (`fxkit.codegen.cuda_expr`); this
module writes the kernel around them: a grid-stride loop over the result's
elements, the broadcast-aware index of each operand, loads and stores. The
seed's ``x = x * x`` ten times on 16e6 float32 elements becomes::

    extern "C" __global__ void kernel(float* __restrict__ out0, const float* __restrict__ x0) {
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 16000000; i += blockDim.x * gridDim.x) {
            const float x0_1 = x0[i];
            const float mul = x0_1 * x0_1;
            ...
            out0[i] = mul_9;
        }
    }

Shapes are fixed per specialisation, so extents are constants (the compiler
turns the index arithmetic into multiplies and shifts). ``kernel`` takes
C-contiguous arrays; dimensions in which every operand is either full or
broadcast merge (`fxkit.codegen.numba_kernel.collapse`), so a bias add reads
``x1[i1]`` with ``i1 = i % 1024``. ``kernel_strided`` takes any strides
(transposes, slices, zero-stride broadcasts): each input's element strides
follow the arrays, one ``long long`` per dimension it spans
(`strided_axes`), and every dimension gets an index of its own. Outputs are
always C-contiguous.

The module is a complete CUDA C++ translation unit without includes (NVRTC
compiles it as it is); the leading comment (`CudaKernelSource.header`)
maps its names to the graph's nodes. This module only writes text;
`fxkit.backends.cupy_backend` compiles and launches it.
"""
import math
from typing import NamedTuple

from fxkit.codegen.block import CodeBlock
from fxkit.codegen.cuda_expr import (RESERVED, SCALAR_DTYPES, STORAGE, CudaEmitter, Helpers, ctype)
from fxkit.codegen.namespace import Namespace
from fxkit.codegen.numba_kernel import collapse, is_full
from fxkit.codegen.template_expr import value_metas
from fxkit.errors import LoweringError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.meta import TensorMeta, broadcast_shapes

INT_INDEX_MAX = 1 << 30
"""Loops over fewer elements index with ``int`` (fast), larger ones with ``long long``; the margin below
2**31 keeps ``i + blockDim.x * gridDim.x`` from overflowing."""


class CudaKernelSource(NamedTuple):
    """A generated CUDA kernel module and what launching it needs.

    Attributes:
        source: the module text (canonical: what is compiled and cached).
        header: the comment mapping its names to graph nodes (shown, not compiled).
        inputs: per kernel input, the `TensorMeta` of an array or the Python type of a scalar.
        outputs: the `TensorMeta` of each output, in the fused op's result order.
        size: the threads' work: elements (elementwise kernels) or rows (row kernels).
        row_length: elements a row (row kernels, a block a row), or None.
        strided: whether the module has ``kernel_strided`` (else callers make inputs contiguous).
    """

    source: str
    header: str
    inputs: tuple
    outputs: tuple
    size: int
    row_length: object = None
    strided: bool = False

    @property
    def text(self):
        """What a user reads: the node comment, then the module."""
        return self.header + self.source


def unsupported(metas):
    """Why a CUDA kernel cannot take values of these metas, or None when it can."""
    for meta in metas:
        if isinstance(meta, TensorMeta):
            if meta.dtype.name not in STORAGE:
                return f"CUDA kernels have no {meta.dtype.name} arrays"
            if not all(type(d) is int for d in meta.shape):
                return f"shape {meta.shape} is not concrete"
        elif type(meta) not in SCALAR_DTYPES:
            return f"a {type(meta).__name__} input"
    return None


def strided_axes(shape):
    """The axes of an input of ``shape`` whose strides ``kernel_strided`` takes (those of extent > 1)."""
    return [k for k, extent in enumerate(shape) if extent != 1]


def index_type(count):
    """The C type indexing ``count`` elements (see `INT_INDEX_MAX`)."""
    return "int" if count <= INT_INDEX_MAX else "long long"


def int_literal(value, itype):
    return f"{value}LL" if itype == "long long" else str(value)


def parameters(namespace, placeholders, metas, results):
    """``(outs, params, declarations)``: the names of outputs and inputs and the C parameter list."""
    outs = [namespace.create_name(f"out{i}") for i in range(len(results))]
    params = [namespace.create_name(f"x{i}") for i in range(len(placeholders))]
    declarations = [f"{STORAGE[metas[r].dtype.name]}* __restrict__ {o}" for o, r in zip(outs, results)]
    for name, node in zip(params, placeholders):
        meta = metas[node]
        if isinstance(meta, TensorMeta):
            declarations.append(f"const {STORAGE[meta.dtype.name]}* __restrict__ {name}")
        else:
            declarations.append(f"{ctype(_scalar_dtype(meta))} {name}")
    return outs, params, declarations


def _scalar_dtype(value):
    return _dt.from_name(SCALAR_DTYPES[type(value)])


def bind_inputs(block, emitter, placeholders, params, metas, offsets, needed=None):
    """Load each array input at its offset (``const float x0_1 = x0[i];``) and bind scalar inputs."""
    namespace = emitter.namespace
    for node, name in zip(placeholders, params):
        meta = metas[node]
        if not isinstance(meta, TensorMeta):
            emitter.bind(node, name, _scalar_dtype(meta))
        elif needed is None or node in needed:
            local = namespace.create_name(name)
            element = f"{name}[{offsets[name]}]"
            if meta.dtype.name == "float16":
                element = f"{emitter.helpers.use('fx_half_to_float')}({element})"
            block.line(f"const {ctype(meta.dtype)} {local} = {element};")
            emitter.bind(node, local, meta.dtype)


def store(block, emitter, out, offset, node, meta):
    """``out0[offset] = <value of node>;`` (half values converted to their bits)."""
    value = emitter.text(node)
    if meta.dtype.name == "float16":
        value = f"{emitter.helpers.use('fx_float_to_half')}({value})"
    block.line(f"{out}[{offset}] = {value};")


def contiguous_offset(spans, extents, indices, flat):
    """The element offset of a C-contiguous operand spanning the groups ``spans`` (positions).

    ``flat`` reads the loop's flat index when the operand spans every group.
    """
    if len(spans) == len(extents):
        return flat
    terms = []
    for g in spans:
        stride = math.prod(extents[h] for h in spans if h > g)
        terms.append(indices[g] if stride == 1 else f"{indices[g]} * {stride}")
    return " + ".join(terms) or "0"


def decompose(block, itype, flat, extents, indices, used):
    """``const int i0 = i / 48;`` ... for the group indices in ``used`` (extents of all groups)."""
    for g in sorted(used):
        below = math.prod(extents[g + 1:])
        text = flat if below == 1 else f"{flat} / {below}"
        if g > 0:
            text = f"{text} % {extents[g]}"
        block.line(f"const {itype} {indices[g]} = {text};")


def grid_stride(block, itype, index, count):
    """The header of a grid-stride loop over ``count`` items (a ``with`` block)."""
    start = "blockIdx.x * blockDim.x + threadIdx.x" if itype == "int" else (
        "(long long)blockIdx.x * blockDim.x + threadIdx.x")
    step = "blockDim.x * gridDim.x" if itype == "int" else "(long long)blockDim.x * gridDim.x"
    return block.indent(f"for ({itype} {index} = {start}; {index} < {int_literal(count, itype)}; "
                        f"{index} += {step}) {{")


def kernel_header(fused, placeholders, names, metas):
    """The leading comment: the kernel's inputs as graph values, and the nodes it fuses."""
    lines = [f"// {fused.name}"]
    sources = names or [p.name for p in placeholders]
    shown = []
    for i, (source, node) in enumerate(zip(sources, placeholders)):
        meta = metas[node]
        kind = f"{meta.dtype.name}{list(meta.shape)}" if isinstance(meta, TensorMeta) else type(meta).__name__
        shown.append(f"x{i} = %{source} ({kind})")
    lines.append("//   inputs: " + ", ".join(shown))
    for node in fused.graph.nodes:
        if node.op == "call":
            lines.append(f"//   {node.format_node()}")
    return "\n".join(lines) + "\n"


def body_parts(fused, args):
    """``(graph, metas, placeholders, results)`` of a fused op called with ``args``, checked for CUDA."""
    graph = fused.graph
    metas = value_metas(graph, args)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    result = graph.output_node().args[0]
    results = list(result) if type(result) is tuple else [result]
    problem = unsupported([metas[n] for n in placeholders] + [metas[r] for r in results] +
                          [metas[n] for n in graph.nodes if n.op == "call"])
    if problem:
        raise LoweringError(f"{fused.name}: no CUDA kernel: {problem}")
    return graph, metas, placeholders, results


def assemble(helpers, entries):
    """The module: the helpers the entries call, then the entries."""
    module = CodeBlock()
    if helpers.source():
        module.lines(helpers.source().split("\n"))
        module.line()
    for k, entry in enumerate(entries):
        if k:
            module.line()
        module.extend(entry)
    return str(module)


# -- elementwise kernels --------------------------------------------------------------------------
def elementwise_kernel(fused, args, names=None):
    """Generate the kernel module of a `FusedOp` of elementwise ops.

    Args:
        fused: the `FusedOp` (its ``graph`` holds placeholders, calls and an output).
        args: per input, a `TensorMeta` or the Python value it receives.
        names: the graph's names of the inputs, for the leading comment.

    Returns:
        A `CudaKernelSource` whose entries are called as ``kernel(out0, ..., x0, ...)`` and
        ``kernel_strided(out0, ..., x0, ..., <strides of x0>, ...)`` with preallocated outputs.

    Raises:
        LoweringError: a value CUDA kernels do not take (bfloat16, a symbolic shape).
    """
    graph, metas, placeholders, results = body_parts(fused, args)
    shape = broadcast_shapes(*(metas[r].shape for r in results),
                             *(metas[n].shape for n in placeholders if isinstance(metas[n], TensorMeta)))
    helpers = Helpers()
    strided = any(isinstance(metas[n], TensorMeta) and strided_axes(metas[n].shape) for n in placeholders)
    entries = [_elementwise_entry(graph, metas, placeholders, results, shape, helpers, False)]
    if strided:
        entries.append(_elementwise_entry(graph, metas, placeholders, results, shape, helpers, True))
    inputs = tuple(metas[n] if isinstance(metas[n], TensorMeta) else type(metas[n]) for n in placeholders)
    return CudaKernelSource(assemble(helpers, entries), kernel_header(fused, placeholders, names, metas), inputs,
                            tuple(metas[r] for r in results), math.prod(shape), None, strided)


def _elementwise_entry(graph, metas, placeholders, results, shape, helpers, strided):
    block = CodeBlock()
    namespace = Namespace(RESERVED)
    outs, params, declarations = parameters(namespace, placeholders, metas, results)
    operands = [(o, metas[r].shape) for o, r in zip(outs, results)]
    arrays = [(p, metas[n].shape) for p, n in zip(params, placeholders) if isinstance(metas[n], TensorMeta)]
    if strided:
        groups = [[d] for d in range(len(shape)) if shape[d] != 1] or [[]]
        for name, s in arrays:
            declarations += [f"long long {name}_s{k}" for k in strided_axes(s)]
    else:
        groups = collapse(shape, [s for _, s in operands + arrays])
    extents = [math.prod(shape[d] for d in dims) for dims in groups]
    count = math.prod(shape)
    itype = index_type(count)
    flat = namespace.create_name("i")
    indices = [namespace.create_name(f"i{dims[0] if strided and dims else g}") for g, dims in enumerate(groups)]
    offsets, used = {}, set()
    for name, s in operands + ([] if strided else arrays):
        spans = [g for g, dims in enumerate(groups) if is_full(shape, s, dims)]
        offsets[name] = contiguous_offset(spans, extents, indices, flat)
        used.update(spans if len(spans) != len(groups) else ())
    if strided:
        position = {dims[0]: g for g, dims in enumerate(groups) if dims}
        for name, s in arrays:
            lead = len(shape) - len(s)
            terms = [f"{indices[position[k + lead]]} * {name}_s{k}" for k in strided_axes(s)]
            used.update(position[k + lead] for k in strided_axes(s))
            offsets[name] = " + ".join(terms) or "0"
    if count == 0:  # never runs: nothing divides by an extent of 0
        offsets, used = dict.fromkeys(offsets, "0"), set()
    emitter = CudaEmitter(namespace, metas, helpers)
    entry = "kernel_strided" if strided else "kernel"
    with block.indent(f'extern "C" __global__ void {entry}({", ".join(declarations)}) {{'):
        with grid_stride(block, itype, flat, count):
            decompose(block, itype, flat, extents, indices, used)
            bind_inputs(block, emitter, placeholders, params, metas, offsets)
            for node in graph.nodes:
                if node.op == "call":
                    emitter.emit(block, node)
            for out, node in zip(outs, results):
                store(block, emitter, out, offsets[out], node, metas[node])
        block.line("}")
    block.line("}")
    return block
