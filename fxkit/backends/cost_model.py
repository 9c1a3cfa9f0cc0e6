"""The numba backend's cost model: a fused kernel only where it beats numpy's path.

A generated kernel computes a fused group in one pass over memory, on every
core, where numpy runs one pass per op; but calling it costs more than
calling a ufunc (the `KernelCall` dispatch and numba's type check of every
argument). For a tiny group (one cheap op over a few hundred elements) that
overhead is all there is, and numpy's ufunc, writing into a buffer the memory
plan found dead, is faster. `fused_decision` estimates both:

    numpy: sum over the group's ops of  passes(op) * (NUMPY_CALL_US + elements * NUMPY_NS)
    numba: NUMBA_CALL_US + elements * NUMBA_NS

(or, for a group broadcasting a smaller input over a conv's channels-last or
channel-major result,
``NUMBA_CALL_US + elements * NUMBA_STRIDED_NS``: see `strided_group`; plus
``elements * NUMBA_OWN_BUFFER_NS`` where numpy would write in place: see
`numpy_in_place`),
where ``passes(op)`` is 1 for an op that is one ufunc
(`fxkit.backends.memory_plan.UFUNC_FORMS`) and `COMPOSITE_PASSES` for the
others (``sigmoid``, ``gelu``, ``silu`` run several numpy expressions), and a
row reduction (softmax, layer_norm) counts `ROW_PASSES`. The constants were
measured on the reference machine (2 cores; compiled ``relu``, ``relu(a + b)``
and ``sigmoid(a) * b`` over 16 to 4e6 float32 elements, numpy against numba
backends): a lone ``relu`` is faster in numpy below ~2000 elements, every
two-op group was faster in numba from 16 elements up. A group that loses runs
its ops as the numpy backend would (`inline_group`).

Each choice is a `Decision`; ``compiled.explain()`` prints them.
"""
import math
from typing import NamedTuple

from fxkit.backends.memory_plan import UFUNC_FORMS
from fxkit.codegen.numba_reduction import row_node
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.op import Op

NUMPY_CALL_US = 1.0
"""Cost of one numpy ufunc call in generated code, microseconds."""
NUMPY_NS = 0.3
"""Cost of one numpy pass per element, nanoseconds (float32, read + write)."""
NUMBA_CALL_US = 2.0
"""Cost of one generated kernel call (dispatch, argument checks, output pick), microseconds."""
NUMBA_NS = 0.1
"""Cost of a fused kernel per element, nanoseconds (one pass, vectorised, threaded when large)."""
NUMBA_OWN_BUFFER_NS = 0.75
"""Extra cost of a kernel per element, nanoseconds, where numpy's ufuncs would work in place: the group's
largest input is an op's result read by the group only (a conv's output under its ReLU or residual add),
so numpy writes the memory the op just wrote, still in cache, while the kernel writes its own pooled
buffer, last touched a whole forward ago (it never runs in place, see `KernelCall`). In ResNet-50 at
batch 1 (minimum of 15 interleaved forwards), ``add, relu`` over 802816 float32 took 0.67-0.76 ms as a
kernel against 0.47 ms as numpy's in-place add and maximum (0.33 ms as a kernel on its own), and a lone
``relu`` over 200704 0.09-0.22 ms against 0.06-0.09."""
NUMBA_STRIDED_NS = 7.0
"""Cost of a kernel per element on its strided entry, nanoseconds: unknown-layout arrays, no SIMD
(EfficientNet's squeeze-excite ``x * sigmoid(s)``, ``x`` channels-last, 301056 to 401408 float32
elements: 7.6 ns each, where numpy's broadcasting multiply, walking memory in order, took 0.3)."""
COMPOSITE_PASSES = 3
"""numpy calls (passes) assumed for an elementwise op that is not exactly one ufunc."""
ROW_PASSES = 4
"""numpy calls (passes) assumed for a row reduction (max, exp, sum, divide for softmax)."""


class Decision(NamedTuple):
    """One lowering choice of the numba backend: which node, what it runs as, and why."""

    node: str
    choice: str
    reason: str

    def __str__(self):
        return f"{self.node}: {self.choice} ({self.reason})"


def estimate_us(fused, elements, strided=False, in_place=False):
    """``(numpy microseconds, numba microseconds)`` for a fused group over ``elements`` elements
    (``strided``: the kernel would run its strided entry, see `strided_group`; ``in_place``: numpy's
    ufuncs could write into the group's input, see `numpy_in_place`)."""
    ops = [n for n in fused.graph.nodes if n.op == "call"]
    row = row_node(fused.graph)
    numpy_us = 0.0
    for node in ops:
        if node is row:
            passes = ROW_PASSES
        elif isinstance(node.target, Op) and node.target in UFUNC_FORMS:
            passes = 1
        else:
            passes = COMPOSITE_PASSES
        numpy_us += passes * (NUMPY_CALL_US + elements * NUMPY_NS * 1e-3)
    per_element = (NUMBA_STRIDED_NS if strided else NUMBA_NS) + (NUMBA_OWN_BUFFER_NS if in_place else 0.0)
    return numpy_us, NUMBA_CALL_US + elements * per_element * 1e-3


def numpy_in_place(node, elements):
    """Whether numpy's ufuncs, run in place of the fused call ``node``, could write into one of its inputs:
    an op's result of ``elements`` elements that nothing else reads (the memory plan then hands it to
    the first ufunc as ``out=``)."""
    for arg in node.args:
        meta = arg.meta.get("tensor_meta") if hasattr(arg, "meta") else None
        if isinstance(meta, TensorMeta) and arg.op == "call" and len(arg.users) == 1 and \
                all(isinstance(d, int) for d in meta.shape) and math.prod(meta.shape) == elements:
            return True
    return False


def strided_group(node, reordered):
    """Whether the fused call ``node`` would run its kernel's strided entry: it broadcasts a smaller
    input over an input in ``reordered`` (names of values whose memory is channels-last or
    channel-major behind an NCHW shape, `fxkit.backends.conv_lowering.reordered_values`).

    `fxkit.backends.numba_launch.KernelCall` runs a kernel over its inputs' memory order only when
    they all have one shape (its code is generated for the graph's shapes), so such a group walks
    the big input against its strides, where numpy's broadcasting ufunc walks memory in order.
    """
    metas = [a.meta.get("tensor_meta") for a in node.args if hasattr(a, "meta")]
    shapes = {tuple(m.shape) for m in metas if isinstance(m, TensorMeta)}
    return len(shapes) > 1 and any(getattr(a, "name", None) in reordered for a in node.args)


def fused_decision(node, reordered=frozenset()):
    """``(keep the kernel, Decision)`` for a call of a `FusedOp` whose metadata is filled
    (``reordered``: see `strided_group`)."""
    fused = node.target
    metas = [a.meta.get("tensor_meta") for a in node.args if hasattr(a, "meta")]
    out = node.meta.get("tensor_meta")
    metas += list(out) if isinstance(out, tuple) else [out]
    sizes = [math.prod(m.shape) for m in metas if isinstance(m, TensorMeta)
             and all(isinstance(d, int) for d in m.shape)]
    elements = max(sizes, default=0)
    strided = strided_group(node, reordered)
    in_place = numpy_in_place(node, elements)
    numpy_us, numba_us = estimate_us(fused, elements, strided, in_place)
    ops = [n.target.name if isinstance(n.target, Op) else str(n.target) for n in fused.graph.nodes
           if n.op == "call"]
    entry = ", broadcast over a reordered input: strided entry" if strided else ""
    entry += ", numpy in place" if in_place else ""
    what = (f"{', '.join(ops)} over {elements} elements{entry}: est. numba {numba_us:.1f} us, "
            f"numpy {numpy_us:.1f} us")
    if numba_us <= numpy_us:
        return True, Decision(node.name, f"numba kernel {fused.name}", what)
    return False, Decision(node.name, "numpy ops", what)


def inline_group(graph, node):
    """Replace the fused call ``node`` by its body's nodes (and its ``getitem`` picks by their values)."""
    fused = node.target
    env = {}
    body_output = None
    placeholders = iter(node.args)
    with graph.inserting_before(node):
        for inner in fused.graph.nodes:
            if inner.op == "placeholder":
                env[inner] = next(placeholders)
            elif inner.op == "output":
                body_output = inner.args[0]
            else:
                env[inner] = graph.node_copy(inner, env.__getitem__)
    if isinstance(body_output, tuple):
        for user in list(node.users):
            # NOTE: fuse_elementwise reads a multi-output group only through getitem picks.
            user.replace_all_uses_with(env[body_output[user.args[1]]])
            graph.erase_node(user)
    else:
        node.replace_all_uses_with(env[body_output])
    graph.erase_node(node)
