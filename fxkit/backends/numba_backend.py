"""The ``numba`` backend: each fused group becomes one generated ``@numba.njit`` kernel.

The pipeline is the default one (`Backend.passes`: dropout, conv-bn folding,
specialisation to registry ops, dead code, CSE, constant folding) followed by

* `SplitLinearBias`: a ``linear`` read by elementwise ops leaves its bias add
  to them, so ``gelu(x @ W.T + b)``'s pointwise tail fuses;
* `FuseElementwise(min_size=1)`: connected elementwise ops become `FusedOp`
  groups, a lone op too: its kernel computes in one pass what numpy does in
  several (``gelu`` over 16e6 float32 elements: 5 ms against 270 ms), on
  every core, into a reused output (no page faults of a fresh one);
* `FuseRows`: softmax, log_softmax and layer_norm absorb the elementwise
  group computing their input and the one reading their result.

Lowering is the numpy backend's straight-line code over raw arrays, except
that

* each fused group runs its generated kernel (`fxkit.codegen.numba_kernel`,
  `fxkit.codegen.numba_reduction`) through a `KernelCall`, when the cost
  model (`fxkit.backends.cost_model`) expects it to beat numpy's ufuncs; a
  group that would lose (a lone cheap op over a few hundred elements), and a
  group numba cannot run (float16 tensors, an unusual row layout), runs its
  ops as the numpy backend does;
* an elementwise kernel with one output writes into a dead buffer of its
  shape when the memory plan finds one (``fused_3(conv2d_3, x, out=conv2d_3)``):
  a conv's tail (ReLU, SiLU, a residual add) then runs in the conv's output;
* convolutions run as their registry rule in `fxkit.backends.conv_lowering`
  says (channels-last or channel-major products with reused buffers, a
  depthwise kernel), or, with ``fxkit.compile``'s ``conv_choice="measure"``,
  as numpy's ``conv2d`` where that was timed faster on the node's shapes
  (`fxkit.backends.conv_choice`); the rules' results' memory is not in NCHW order, so a
  ``view`` of one (or of an elementwise result or max pool of one) runs as
  ``reshape``, and the cost model prices a group broadcasting over one as
  its kernel's strided entry would run.
* ``linear`` with a parameter weight multiplies by a ``(in, out)`` copy of
  it (`fxkit.backends.linear_lowering`: OpenBLAS packs a transposed operand
  on every call);
* float32 ``scaled_dot_product_attention`` without dropout runs its two
  products in numpy and everything between them as one numba pass per row
  (`fxkit.backends.numba_attention`).

The other ops (matmul, reshapes, pooling, ...) call their numpy
implementations. ``compiled.explain()`` lists every choice with its reason.
Kernels are compiled when the specialisation is lowered, cached in memory by
source and on disk by numba (`fxkit.backends.numba_cache`).

Outputs of kernels are never overwritten while referenced (see
`fxkit.backends.numba_launch`): results a caller keeps stay valid.

Example:
    >>> compiled = fxkit.compile(seed_chain, backend="numba", example_inputs=[(16_000_000,)])
    >>> print(compiled.code)
    def forward(x):
        mul_9 = fused_0(x)
        return mul_9
    >>> print(compiled.kernel_sources()["fused_0"])
"""
import copy
import functools
import importlib.util

import numpy as np

from fxkit.backends.backend import register_backend
from fxkit.backends.batch_norm_lowering import BATCH_NORM_RULES
from fxkit.backends.conv_choice import MODES, ConvChooser
from fxkit.backends.conv_grad_lowering import GRAD_CONV_RULES, share_columns
from fxkit.backends.conv_lowering import CONV_RULES, reordered_values
from fxkit.backends.cost_model import Decision, fused_decision, inline_group
from fxkit.backends.fuse_rows import FuseRows
from fxkit.backends.kernel_source import fused_kernel_source
from fxkit.backends.linear_lowering import LINEAR_RULES
from fxkit.backends.numba_launch import KernelCall
from fxkit.backends.numpy_backend import NumpyBackend, _check_devices, build_forward
from fxkit.backends.pool_lowering import POOL_RULES
from fxkit.backends.scatter_lowering import SCATTER_RULES
from fxkit.backends.split_bias import SplitLinearBias, rejoin_linear_biases
from fxkit.codegen.numba_kernel import elementwise_kernel, unsupported
from fxkit.codegen.numba_reduction import row_kernel
from fxkit.errors import LoweringError
from fxkit.runtime.registry import get_op
from fxkit.transforms import EliminateDeadCode
from fxkit.transforms.fuse_elementwise import FuseElementwise
from fxkit.transforms.fused_op import FusedOp


ATTENTION = get_op("scaled_dot_product_attention")
"""Lowered by `fxkit.backends.numba_attention` (numpy products around a numba softmax)."""


class NumbaBackend(NumpyBackend):
    """Fused groups as numba kernels, everything else as the numpy backend (see the module docstring)."""

    name = "numba"
    device_types = ("cpu",)
    conv_choice = "rules"

    def configure(self, conv_choice="rules", **options):
        """``conv_choice``: how each conv picks between its rule and numpy's ``conv2d``
        (`fxkit.backends.conv_choice.MODES`: ``"rules"``, ``"measure"`` times both, ``"numpy"``)."""
        if conv_choice not in MODES:
            raise LoweringError(f"fxkit.compile: the numba backend's conv_choice is one of {', '.join(MODES)}, "
                                f"got {conv_choice!r}")
        backend = super().configure(**options)
        if conv_choice == backend.conv_choice:
            return backend
        configured = copy.copy(backend)
        configured.conv_choice = conv_choice
        return configured

    def passes(self, gm, example_inputs):
        return super().passes(gm, example_inputs) + [SplitLinearBias(), FuseElementwise(min_size=1), FuseRows(),
                                                     EliminateDeadCode()]

    def lower(self, gm, specs):
        _check_devices(list(gm.graph.nodes), self.device_types, self.name)
        calls, kernels, writers, decisions = self.kernel_calls(gm)
        return build_forward(gm, list(gm.graph.nodes), np, self.name, calls, kernels, writers, decisions)

    def kernel_calls(self, gm):
        # NOTE: numba takes ~0.5 s to import: only a numba compilation pays for it.
        from fxkit.runtime.blas_threads import share_blas_threads
        from fxkit.backends.numba_cache import load_kernel_module

        pool_shared = bool(share_blas_threads())  # NOTE: before numba's pool starts: BLAS and kernels share it

        order = {node.name: i for i, node in enumerate(gm.graph.nodes)}
        decisions = []
        calls, in_order = {}, set()  # in_order: nodes whose calls give memory in their shape's order (not convs)
        chooser = ConvChooser(self.conv_choice)
        for node in gm.graph.nodes:
            if node.op == "call" and node.target in CONV_RULES:
                call, decision = chooser.choose(node, *CONV_RULES[node.target](node), _reordering(calls, in_order))
            elif node.op == "call" and node.target in GRAD_CONV_RULES:
                call, decision = GRAD_CONV_RULES[node.target](node)
                if getattr(call, "in_shape_order", False):
                    in_order.add(node)
            elif node.op == "call" and node.target in BATCH_NORM_RULES:
                call, decision = BATCH_NORM_RULES[node.target](node)
            elif node.op == "call" and node.target in SCATTER_RULES:
                call, decision = SCATTER_RULES[node.target](node)
                in_order.add(node)
            elif node.op == "call" and node.target in LINEAR_RULES:
                call, decision = LINEAR_RULES[node.target](node)
                in_order.add(node)
            elif node.op == "call" and node.target is ATTENTION:
                from fxkit.backends.numba_attention import lower_attention  # NOTE: see the numba import above

                call, decision = lower_attention(node)
                in_order.add(node)
            else:
                continue
            decisions.append(decision)
            if call is not None:
                calls[node] = call
        reordering = _reordering(calls, in_order)
        chooser.settle(gm.graph, reordering, decisions)
        calls.update(reordering)
        share_columns(gm.graph, calls)
        reordered = reordered_values(gm.graph.nodes, reordering)
        while True:  # NOTE: a pool lowered channels-last makes its readers' inputs channels-last in turn
            lowered = False
            for node in gm.graph.nodes:
                if node.op == "call" and node.target in POOL_RULES and node not in calls and \
                        node.name not in {d.node for d in decisions}:
                    call, decision = POOL_RULES[node.target](node, reordered)
                    if decision is not None:
                        decisions.append(decision)
                    if call is not None:
                        calls[node] = call
                        lowered = True
            if not lowered:
                break
            reordered = reordered_values(gm.graph.nodes, _reordering(calls, in_order))
        decisions += reshape_reordered_views(gm.graph, reordered)
        sources = {}
        for node in list(gm.graph.nodes):
            if node.op == "call" and isinstance(node.target, FusedOp):
                source = kernel_source(node, pool_shared)
                if source is None:
                    decisions.append(Decision(node.name, "numpy ops", "no numba kernel for this group's "
                                                                       "dtypes or layout"))
                    continue
                keep, decision = fused_decision(node, reordered)
                decisions.append(decision)
                if keep:
                    sources[node] = source
                else:
                    inline_group(gm.graph, node)
        rejoin_linear_biases(gm.graph)
        kernels, writers = {}, set()
        for node in gm.graph.nodes:
            source = sources.get(node)
            if source is not None:
                call = KernelCall(node.target.name, source, load_kernel_module(source.source))
                precompile(call, source)
                calls[node] = call
                kernels[node.target.name] = source.text
                if source.elementwise and len(source.outputs) == 1:
                    writers.add(node)  # NOTE: may write into a dead input of its shape (the conv's epilogue)
        decisions.sort(key=lambda d: order[d.node])
        return calls, kernels, writers, decisions


def _reordering(calls, in_order):
    """The lowered calls whose results may live in another memory order than their shape's (convs, pools):
    ``calls`` without the nodes of ``in_order`` (linear, attention), whose results are plain arrays."""
    return {node: call for node, call in calls.items() if node not in in_order}


def reshape_reordered_views(graph, reordered):
    """Run each ``view`` of a reordered value as ``reshape``; returns the `Decision` of each.

    The graph's shapes are NCHW while such a value's memory is ``(N, H, W, C)``
    or ``(C, N, H, W)`` (see `fxkit.backends.conv_lowering.reordered_values`), so
    ``x.view(n, -1)`` cannot alias it (LeNet's flatten after a pool): ``reshape``
    gives the same values, copying.
    """
    view, reshape = get_op("view"), get_op("reshape")
    decisions = []
    for node in graph.nodes:
        if node.op == "call" and node.target is view and not node.kwargs and \
                getattr(node.args[0], "name", None) in reordered:
            node.target = reshape
            decisions.append(Decision(node.name, "reshape", f"view of %{node.args[0].name}, whose memory is "
                                                            f"not in NCHW order: copied"))
    return decisions


def kernel_source(node, pool_shared=False):
    """The numba kernel of a fused call, or None when its group runs with numpy instead; ``pool_shared``:
    whether numpy's BLAS runs on numba's threads (more kernels then run in parallel)."""
    return fused_kernel_source(node, unsupported, functools.partial(row_kernel, pool_shared=pool_shared),
                               functools.partial(elementwise_kernel, pool_shared=pool_shared))


def precompile(call, source):
    """Compile the contiguous entry point now, for the specialisation's dtypes and ranks.

    The first call then runs at full speed, ``compiled.stats.seconds`` includes
    the compilation, and an error in generated code surfaces while compiling,
    with the kernel's source.
    """
    from numba import from_dtype, types  # NOTE: see NumbaBackend.lower

    signature = [types.Array(from_dtype(m.dtype.np), len(m.shape), "C") for m in source.outputs]
    for meta in source.inputs:
        if isinstance(meta, type):
            signature.append({bool: types.boolean, int: types.int64, float: types.float64}[meta])
        else:
            signature.append(types.Array(from_dtype(meta.dtype.np), len(meta.shape), "C"))
    try:
        call.compile(tuple(signature))
    except Exception as exc:
        raise LoweringError(f"numba could not compile the kernel of {call.__name__}: {exc}\n"
                            f"{source.text}") from exc


if importlib.util.find_spec("numba") is not None:
    register_backend(NumbaBackend())
