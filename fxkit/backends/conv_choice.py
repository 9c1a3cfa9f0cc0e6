"""A measured choice, per conv node, between its `conv_lowering` rule and numpy's ``conv2d``.

The rules of `fxkit.backends.conv_lowering` compute in channels-last or
channel-major memory and win where their one big product and reused buffers
pay (ResNet-50's 56x56 layer at batch 8: 6 against 27 ms for a 1x1 conv,
2-4x for the 3x3s); but on the reference machine (2 cores, OpenBLAS)
numpy's per-image ``(OC, K) @ (K, OH*OW)`` products beat them on other
shapes: ResNet-18's 56x56 3x3 convs at batch 1 (2.3 against 1.8-2.1 ms),
ResNet-50's 28x28 layer at batch 8 (1x1: 5.5-6.5 against 4.9-5.5 ms; 3x3:
16.5-18.8 against 12.3-14.1 ms), minimum of 15 interleaved calls each.
Which orientation BLAS runs faster depends on its kernels and the core
count, so no threshold written here would hold on every machine: like
cuDNN's benchmark mode, each distinct shape is timed once, on this machine,
when it is lowered (`choose`), and the faster path kept (numpy's only when
`MARGIN` faster: a tie keeps the rule, whose result the next conv reads
without a copy).

The candidates are timed on random arrays of the node's shapes, its input in
the memory order it will have (a channels-last or channel-major view when the
value comes from a lowered conv, see `input_layout`), so numpy's candidate pays
the copy its strided input costs, and a rule reading NCHW memory pays its
transposing copy. Numpy's path is given back to the rule where its NCHW
result would meet a reordered value in an elementwise group (a residual add,
`ConvChooser.settle`): such a kernel runs its strided entry
(`fxkit.backends.cost_model.NUMBA_STRIDED_NS`: 7 ns an element, more than
the products' difference). Convs too large to time cheaply
(`MEASURE_MAX_FLOPS`) keep their rule. Results are cached per shape, layout,
dtype and thread count for the process.

Why timing is not the default (``conv_choice="rules"`` is): a conv timed alone
runs on buffers in cache, in a model after the rest of the network, and on
the reference machine the two disagreed. In ResNet-18 and ResNet-50 at batch
1 (minimum of 15 interleaved forwards, load average 5.5 on 2 cores) timing
sent the 56x56 3x3 convs to numpy's path, which then took 2.6-3.0 ms in the
model against 1.9-2.0 ms for their rule, and the network lost 10% overall;
with the rules alone (and their columns shared, `conv_lowering.scratch`) no
conv lost more than noise to numpy's. Where a BLAS or a machine makes the
rules lose, ``conv_choice="measure"`` finds it.

Both paths compute the same convolution (float32 or float64 products over
the same windows); only summation order differs. ``explain()`` prints the
choice with both times.
"""
import math
import time

import numpy as np

from fxkit.backends.conv_lowering import ChannelMajorConv, reordered_values
from fxkit.backends.cost_model import Decision
from fxkit.runtime.meta import TensorMeta
from fxkit.transforms.fused_op import FusedOp

ROUNDS = 5
"""Timed calls of each candidate (after one warm-up), interleaved; the minimum counts (noise only adds:
with the machine's 2 cores shared by other work, minima of 3 still differed 2x between identical shapes)."""
MARGIN = 0.15
"""Numpy's path must be this much faster (a fraction of the rule's time) to be chosen: in a model the
rule's result feeds the next conv without a copy, which timing one conv alone does not see."""
MEASURE_MAX_FLOPS = 2e9
"""Convs above this many multiply-adds x 2 keep their rule untimed (~50 ms a call at 40 GFLOP/s: timing
would cost a compilation seconds); the large early layers it leaves out are where the rules win most."""
MODES = ("rules", "measure", "numpy")
"""``fxkit.compile(..., backend="numba", conv_choice=...)``: always the rule (default), time both, or
numpy's ``conv2d`` for every conv a rule covers (for tests and comparisons)."""
_TIMES = {}  # cache key -> (rule seconds, numpy seconds)


def input_layout(node, calls):
    """The memory order of ``node``'s value: ``"channels-last"``, ``"channel-major"`` or ``"nchw"``.

    A lowered conv (``calls``: node -> call) sets it; an elementwise group keeps
    the order of its first input of its own rank that has one (as
    `fxkit.backends.conv_lowering.reordered_values` reasons).
    """
    call = calls.get(node)
    if call is not None:
        return "channel-major" if isinstance(call, ChannelMajorConv) else "channels-last"
    if _elementwise(node):
        rank = _rank(node)
        for arg in node.args:
            if hasattr(arg, "meta") and _rank(arg) == rank:
                layout = input_layout(arg, calls)
                if layout != "nchw":
                    return layout
    return "nchw"


def _rank(node):
    meta = node.meta.get("tensor_meta")
    return len(meta.shape) if isinstance(meta, TensorMeta) else None


def _elementwise(node):
    return node.op == "call" and (isinstance(node.target, FusedOp) or getattr(node.target, "kind", None) == "elementwise")


def _sources(node, chosen):
    """The convs in ``chosen`` whose NCHW result reaches ``node`` through elementwise ops of one rank."""
    if node in chosen:
        return {node}
    found = set()
    if _elementwise(node):
        for arg in node.args:
            if hasattr(arg, "meta") and _rank(arg) == _rank(node):
                found |= _sources(arg, chosen)
    return found


def _array(meta, layout, rng):
    a = rng.standard_normal(meta.shape).astype(meta.dtype.np)
    if layout == "channels-last":
        return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    if layout == "channel-major":
        return np.ascontiguousarray(a.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    return a


def _seconds(candidates):
    """Minimum seconds of each candidate over `ROUNDS` interleaved calls, after a warm-up of each."""
    for fn in candidates:
        fn()
    best = [math.inf] * len(candidates)
    for _ in range(ROUNDS):
        for i, fn in enumerate(candidates):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def _threads():
    import numba  # NOTE: loaded already: a conv call exists only once the numba backend lowers

    return numba.get_num_threads()


class ConvChooser:
    """Chooses, conv by conv in graph order, between each rule's call and numpy's ``conv2d`` (`choose`);
    then `settle` puts back the rule where numpy's NCHW result meets a reordered value in an
    elementwise group (a residual add of a channels-last shortcut), which would run its strided entry.

    Args:
        mode: one of `MODES`.
    """

    def __init__(self, mode="rules"):
        self.mode = mode
        self.rules = {}  # node that got numpy's path -> (its rule's call, the rule's Decision)

    def choose(self, node, call, decision, calls):
        """``(call or None, Decision)`` for the conv ``node``, given its rule's ``call`` and ``decision``
        (``call`` None: numpy's path already) and ``calls`` (node -> call) of the nodes lowered so far."""
        if call is None or self.mode == "rules":
            return call, decision
        if self.mode == "numpy":
            chosen = Decision(node.name, "numpy conv2d", f"conv_choice='numpy' (the rule: {decision.choice})")
        else:
            chosen = self._measured(node, call, decision, calls)
        if chosen.choice == decision.choice:
            return call, chosen
        self.rules[node] = (call, decision)
        return None, chosen

    def _measured(self, node, call, decision, calls):
        arrays = [a.meta["tensor_meta"] if hasattr(a, "meta") else a for a in node.args]
        x, weight, out = arrays[0], arrays[1], node.meta["tensor_meta"]
        flops = 2 * math.prod(out.shape) * math.prod(weight.shape[1:])
        if flops > MEASURE_MAX_FLOPS:
            return decision._replace(reason=f"{decision.reason}; {flops:.1e} flops: not timed")
        layout = input_layout(node.args[0], calls)
        key = (tuple(x.shape), layout, tuple(weight.shape), x.dtype.name, _threads(),
               tuple(tuple(a.shape) if isinstance(a, TensorMeta) else a for a in arrays[2:]))
        if key not in _TIMES:
            rng = np.random.default_rng(0)
            values = [_array(m, layout if i == 0 else "nchw", rng) if isinstance(m, TensorMeta) else m
                      for i, m in enumerate(arrays)]
            impl = node.target.impl
            _TIMES[key] = tuple(_seconds([lambda: call(*values), lambda: impl(np, *values)]))
        rule_s, numpy_s = _TIMES[key]
        measured = f"measured {rule_s * 1e3:.3f} ms, numpy conv2d {numpy_s * 1e3:.3f} ms ({layout} input)"
        if numpy_s < rule_s * (1 - MARGIN):
            return Decision(node.name, "numpy conv2d", f"{measured}; the rule: {decision.choice}")
        return decision._replace(reason=f"{decision.reason}; {measured}")

    def settle(self, graph, calls, decisions):
        """Give back their rule's call to the convs whose numpy result would meet a reordered value in an
        elementwise group, until none does; updates ``calls`` and ``decisions`` (a list) in place."""
        while True:
            reordered = reordered_values(graph.nodes, calls)
            chosen = {n for n in self.rules if n not in calls}
            back = set()
            for node in graph.nodes:
                if _elementwise(node):
                    args = [a for a in node.args if hasattr(a, "meta") and _rank(a) == _rank(node)]
                    if any(a.name in reordered for a in args):
                        for a in args:
                            back |= _sources(a, chosen)
            if not back:
                return
            for node in back:
                call, decision = self.rules[node]
                calls[node] = call
                index = next(i for i, d in enumerate(decisions) if d.node == node.name)
                decisions[index] = decision._replace(reason=f"{decision.reason}; numpy conv2d was faster, but "
                                                            f"its NCHW result meets a reordered value in an "
                                                            f"elementwise group")
