"""A `FusedOp` of elementwise ops -> the source of one ``@numba.njit`` kernel module.

The body's statements come from the ops' templates (`fxkit.codegen.numba_scalar`);
this module builds the loops around them. The seed's ``x = x * x`` ten times
on 16e6 float32 elements becomes (abridged)::

    @numba.njit(cache=True, error_model="numpy", nogil=True, parallel=True)
    def kernel(out0, x0):
        n0 = out0.shape[0]
        out0_v = out0.reshape((n0,))
        x0_v = x0.reshape((n0,))
        for i0 in numba.prange(n0):
            x0_1 = x0_v[i0]
            mul = np.float32(x0_1 * x0_1)
            ...
            out0_v[i0] = mul_9

``kernel`` takes C-contiguous arrays and collapses the loop nest: adjacent
dimensions in which every operand is either full or broadcast merge, so most
kernels are one flat loop and a bias add two (rows, columns) with the bias
read at ``[0, i1]``. ``kernel_strided`` takes any strides (transposes,
slices, zero-stride broadcasts) and loops over every dimension. A result of
at least `PARALLEL_MIN_STREAMING` elements (`PARALLEL_MIN` when its scalar
code calls a function LLVM does not vectorise, like ``gelu``'s ``erf``) runs
on numba's thread pool; smaller ones run serially, which compiles three
times faster and skips the thread-pool launch. Shapes are fixed per
specialisation, so the choice is made here.

How a parallel kernel splits its work depends on its loop nest. One flat
loop over contiguous views is itself the ``prange``: LLVM vectorises it, and
it streams at the machine's copy bandwidth. A nest (broadcast operands, any
strided layout) is a function of its own, ``loops``, called by a ``prange``
over tasks of about `BLOCK` elements on slices of the first dimension:
inside a ``prange`` body a nest's arrays have unknown layout and LLVM does
not vectorise it (numba issue #2680), while slices of C-contiguous views
keep their layout. The flat loop is not written that way because the calls
on slices ran 1.5x slower than one ``prange`` over the views whenever input
and output lay close together in memory (measured on 64 MB arrays).

Generated names are canonical (inputs ``x0, x1, ...``, locals named after
their ops, no shapes): two groups computing the same thing share one
source, so one compiled kernel. The leading comment maps them back to the
graph's nodes. This module only writes text; `fxkit.backends.numba_backend`
compiles it.
"""
import math
from typing import NamedTuple

from fxkit.codegen.block import CodeBlock
from fxkit.codegen.namespace import Namespace
from fxkit.codegen.numba_scalar import ScalarEmitter, calls_slow_functions, value_metas
from fxkit.runtime.meta import TensorMeta, broadcast_shapes

PARALLEL_MIN = 1 << 19
"""Results with fewer elements (2 MB of float32) run serially: a thread-pool launch costs ~10 µs, and
waking numba's threads between BLAS calls (convolutions, matmuls) costs the BLAS threads more."""
PARALLEL_MIN_SHARED = 1 << 16
"""`PARALLEL_MIN` when numpy's BLAS runs on numba's threads (`fxkit.runtime.blas_threads`): they are awake
after each product and no other pool waits for the cores. The Transformer block's ``gelu`` over 262144
float32 (batch 8) took 0.142 ms in parallel against 0.244 ms serial, the block 1.41 against 1.52 ms."""
PARALLEL_MIN_STREAMING = 1 << 23
"""The same for a kernel of vectorised code only (arithmetic, comparisons, ``exp32``): it streams memory,
which one core nearly saturates, and right after a BLAS call (a conv's ReLU, a residual add) numba's
worker waits for a core OpenBLAS's spinning workers hold. On the reference machine (2 cores, OpenBLAS
and numba on 2 threads each, medians of 15 interleaved calls each after a 3136x576x256 product):
``relu(a + b)`` over 802816 float32 took 0.65 ms serial and 3.0 ms parallel, over 3.2e6 2.6 against
11.6 ms, over 6.4e6 4.9 against 7.0 ms; ResNet-50's four parallel ``relu``/``add, relu`` kernels at
batch 1 (802816 elements) took 4-8 ms each against 0.7-0.9 ms serial. ``gelu`` (``erf32``, about 4 ns
an element serial) still halves on two threads, so it keeps `PARALLEL_MIN`."""
BLOCK = 16384
"""Elements a parallel task computes (runs of contiguous, vectorised loops)."""
SUPPORTED_DTYPES = frozenset(("float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool"))
HEADER = ("import math", "", "import numba", "import numpy as np", "",
          "from fxkit.backends.numba_math import erf32, exp32, maximum, minimum, tanh32")
# Names the module binds: never handed out for locals.
RESERVED = ("math", "numba", "np", "erf32", "exp32", "maximum", "minimum", "tanh32", "kernel", "kernel_strided",
            "loops", "loops_strided", "rows", "range", "min", "max", "abs", "bool")


def jit_decorator(parallel):
    """The decorator line of a kernel function: cached on disk, numpy's division semantics, no GIL."""
    return f'@numba.njit(cache=True, error_model="numpy", nogil=True{", parallel=True" if parallel else ""})'


def parallel_for(shape, streaming=False, pool_shared=False):
    """Whether a kernel over ``shape`` runs on numba's thread pool: `PARALLEL_MIN` elements or more
    (`PARALLEL_MIN_SHARED` when BLAS shares the pool: ``pool_shared``), or `PARALLEL_MIN_STREAMING` for a
    kernel that only streams memory (``streaming``)."""
    least = PARALLEL_MIN_STREAMING if streaming else PARALLEL_MIN_SHARED if pool_shared else PARALLEL_MIN
    return math.prod(shape) >= least


class KernelSource(NamedTuple):
    """A generated kernel module and what calling it needs.

    Attributes:
        source: the module text (canonical: what is compiled and cached).
        header: the comment mapping its names to graph nodes (shown, not compiled).
        inputs: per kernel input, the `TensorMeta` of an array or the Python type of a scalar.
        outputs: the `TensorMeta` of each output, in the fused op's result order.
        elementwise: whether each output element depends only on the inputs at its
            position (row kernels reduce along the last dimensions: they do not).
    """

    source: str
    header: str
    inputs: tuple
    outputs: tuple
    elementwise: bool = True

    @property
    def text(self):
        """What a user reads: the node comment, then the module."""
        return self.header + self.source


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


# -- loops ----------------------------------------------------------------------------------------
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
            if shape[d] == 1:
                continue
            name, operand_shape = next((n, s) for n, s in operands if is_full(shape, s, [d]))
            factors.append(f"{name}.shape[{d - (len(shape) - len(operand_shape))}]")
        extent = namespace.create_name(f"n{g}")
        block.line(f"{extent} = {' * '.join(factors) or '1'}")
        extents.append(extent)
    return extents


def view_shapes(shape, groups, operands):
    """Each operand's shape collapsed onto ``groups`` (``None`` marks a group it spans)."""
    return {name: tuple(None if is_full(shape, s, dims) else 1 for dims in groups) for name, s in operands}


def view_loops(groups, views):
    """How a loop nest over collapsed views sees them: ``(inner, inner_shape, inner_groups)``.

    One dimension a group: ``inner`` gives each operand's view shape with 2
    standing for "spans the group" and 1 for "broadcast"; ``inner_shape`` is
    the nest's shape in the same terms, ``inner_groups`` its groups (one a dimension).
    """
    inner = {name: tuple(2 if d is None else 1 for d in dims) for name, dims in views.items()}
    return inner, tuple(2 if dims else 1 for dims in groups), [[g] for g in range(len(groups))]


def function_namespace(reserved, arguments):
    """The names of a generated function's locals: the module's reserved names and its arguments taken."""
    names = Namespace(reserved)
    for name in arguments:
        names.create_name(name)
    return names


def contiguous_views(block, namespace, extents, views):
    """``<name>_v = <name>.reshape(...)`` collapsing each C-contiguous operand (see `view_shapes`)."""
    names = {}
    for name, dims in views.items():
        text = ", ".join(e if d is None else "1" for e, d in zip(extents, dims))
        names[name] = namespace.create_name(f"{name}_v")
        block.line(f"{names[name]} = {name}.reshape(({text}{',' if len(dims) == 1 else ''}))")
    return names


def element_index(shape, operand_shape, groups, indices, strided):
    """The subscript reading an operand at the loop's position (``0`` where it broadcasts)."""
    if not strided:
        return ", ".join(i if is_full(shape, operand_shape, dims) else "0" for i, dims in zip(indices, groups))
    if not operand_shape:
        return "()"
    offset = len(shape) - len(operand_shape)
    by_dim = {dims[0]: i for i, dims in zip(indices, groups) if dims}
    return ", ".join("0" if extent == 1 else by_dim[k + offset] for k, extent in enumerate(operand_shape))


def emit_launch(block, namespace, function, arguments, split, extents, parallel):
    """Call ``function`` once, or (parallel) once a task on slices of the first dimension.

    Args:
        arguments: the call's argument names, in order.
        split: ``{argument: axis}`` of the arguments spanning the first loop
            dimension, and which of their axes it is (sliced per task).
        extents: the loop extents (local names); tasks take ``BLOCK`` elements.
    """
    if not parallel:
        block.line(f"{function}({', '.join(arguments)})")
        return
    per, task, start, stop = (namespace.create_name(n) for n in ("per", "task", "start", "stop"))
    block.line(f"{per} = max(1, {BLOCK} // max({' * '.join(extents[1:]) or '1'}, 1))")
    with block.indent(f"for {task} in numba.prange(({extents[0]} + {per} - 1) // {per}):"):
        block.line(f"{start} = {task} * {per}")
        block.line(f"{stop} = min({start} + {per}, {extents[0]})")
        sliced = [f"{a}[{':, ' * split[a]}{start}:{stop}]" if a in split else a for a in arguments]
        block.line(f"{function}({', '.join(sliced)})")


def emit_nest(block, indices, extents, body):
    """Nested ``for`` loops over ``extents`` with ``body(block)`` innermost."""
    if not extents:
        body(block)
        return
    with block.indent(f"for {indices[0]} in range({extents[0]}):"):
        emit_nest(block, indices[1:], extents[1:], body)


# -- elementwise kernels --------------------------------------------------------------------------
def elementwise_kernel(fused, args, names=None, pool_shared=False):
    """Generate the kernel module of a `FusedOp` of elementwise ops.

    Args:
        fused: the `FusedOp` (its ``graph`` holds placeholders, calls and an output).
        args: per input, a `TensorMeta` or the Python value it receives.
        names: the graph's names of the inputs, for the leading comment.
        pool_shared: whether numpy's BLAS runs on numba's threads (`parallel_for`).

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
        _elementwise_entry(module, graph, metas, placeholders, results, shape, strided, pool_shared)
    inputs = tuple(metas[n] if isinstance(metas[n], TensorMeta) else type(metas[n]) for n in placeholders)
    return KernelSource(str(module), kernel_header(fused, placeholders, names), inputs,
                        tuple(metas[r] for r in results))


def _elementwise_entry(module, graph, metas, placeholders, results, shape, strided, pool_shared):
    """``loops[_strided]`` (the loop nest) and ``kernel[_strided]`` (collapsing, launching).

    A parallel contiguous kernel whose operands collapse to one flat loop runs
    that loop itself as a ``prange`` over the views: no ``loops`` function.
    """
    suffix = "_strided" if strided else ""
    namespace = Namespace(RESERVED)
    params = [namespace.create_name(f"x{i}") for i in range(len(placeholders))]
    outs = [namespace.create_name(f"out{i}") for i in range(len(results))]
    operands = [(outs[i], metas[r].shape) for i, r in enumerate(results)]
    operands += [(params[i], metas[n].shape) for i, n in enumerate(placeholders) if isinstance(metas[n], TensorMeta)]
    if strided:
        groups = [[d] for d in range(len(shape)) if shape[d] != 1] or [[]]
        # NOTE: 0-d arrays reach the loops as 1-element views: numba's parallel lowering hands the
        # loops a 0-d array's scalar instead of the array, and ``x[()]`` on it does not compile.
        inner = {name: s or (1,) for name, s in operands}
        inner_shape = shape
        loop_groups = groups
    else:
        groups = collapse(shape, [s for _, s in operands])
        views = view_shapes(shape, groups, operands)
        inner, inner_shape, loop_groups = view_loops(groups, views)
    parallel = parallel_for(shape, not calls_slow_functions(graph, metas), pool_shared) and bool(groups[0])
    flat = parallel and not strided and len(groups) == 1
    body = _ElementwiseBody(graph, metas, placeholders, results, params, outs, inner, inner_shape, loop_groups,
                            strided)
    if not flat:
        module.lines(["", ""])
        module.line(jit_decorator(False))
        with module.indent(f"def loops{suffix}({', '.join(outs + params)}):"):
            names = function_namespace(RESERVED, outs + params)
            extents = group_extents(module, names, inner_shape, loop_groups, list(inner.items()))
            indices = [names.create_name(f"i{g}") for g in range(len(loop_groups))]
            emit_nest(module, indices, extents, lambda block: body.emit(block, names, indices, {}))
    module.lines(["", ""])
    module.line(jit_decorator(parallel))
    with module.indent(f"def kernel{suffix}({', '.join(outs + params)}):"):
        extents = group_extents(module, namespace, shape, groups, operands)
        if strided:
            scalars = {name: namespace.create_name(f"{name}_v") for name, s in operands if not s}
            for name, view in scalars.items():
                module.line(f"{view} = {name}.reshape((1,))")
            arguments = [scalars.get(name, name) for name in outs + params]
            split = {name: groups[0][0] - (len(shape) - len(s)) for name, s in operands
                     if is_full(shape, s, groups[0])}
        else:
            view_names = contiguous_views(module, namespace, extents, views)
            if flat:
                index = namespace.create_name("i0")
                with module.indent(f"for {index} in numba.prange({extents[0]}):"):
                    body.emit(module, namespace, [index], view_names)
                return
            arguments = [view_names.get(name, name) for name in outs + params]
            split = {view_names[name]: 0 for name, dims in views.items() if dims[0] is None}
        emit_launch(module, namespace, f"loops{suffix}", arguments, split, extents, parallel)


class _ElementwiseBody:
    """The statements computing one element: read the inputs, the ops' scalar code, write the outputs.

    Args:
        inner: per array (output or input name), its shape as the loops see it.
        inner_shape, loop_groups: the loops' shape and its dimension groups.
        strided: whether the loops index every dimension (`element_index`).
    """

    def __init__(self, graph, metas, placeholders, results, params, outs, inner, inner_shape, loop_groups,
                 strided):
        self.graph, self.metas, self.placeholders, self.results = graph, metas, placeholders, results
        self.params, self.outs, self.inner = params, outs, inner
        self.inner_shape, self.loop_groups, self.strided = inner_shape, loop_groups, strided

    def emit(self, block, names, indices, arrays):
        """Write the body into ``block``; ``arrays`` renames arrays (to their contiguous views)."""
        emitter = ScalarEmitter(names, self.metas)
        for i, node in enumerate(self.placeholders):
            param = self.params[i]
            if not isinstance(self.metas[node], TensorMeta):
                emitter.bind(node, emitter.name(param))
                continue
            local = names.create_name(param)
            index = element_index(self.inner_shape, self.inner[param], self.loop_groups, indices, self.strided)
            block.line(f"{local} = {arrays.get(param, param)}[{index}]")
            emitter.bind(node, emitter.name(local))
        for node in self.graph.nodes:
            if node.op == "call":
                emitter.emit(block, node)
        for out, node in zip(self.outs, self.results):
            index = element_index(self.inner_shape, self.inner[out], self.loop_groups, indices, self.strided)
            block.line(f"{arrays.get(out, out)}[{index}] = {emitter.text(node)}")


def kernel_header(fused, placeholders, names):
    """The leading comment: the kernel's inputs as graph values, and the nodes it fuses."""
    lines = [f"# {fused.name}"]
    sources = names or [p.name for p in placeholders]
    lines.append("#   inputs: " + ", ".join(f"x{i} = %{s}" for i, s in enumerate(sources)))
    for node in fused.graph.nodes:
        if node.op == "call":
            lines.append(f"#   {node.format_node()}")
    return "\n".join(lines) + "\n"
