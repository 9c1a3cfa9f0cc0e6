"""`split_pipeline`: cut a model into ``k`` pipeline stages, at ``pipe_split()`` markers or balanced.

Without markers the stages are chosen from the cost model: the graph's
``call`` nodes in topological order are the units, a *cut candidate* is a
boundary between two units across which at most ``max_crossing`` tensors
flow (block boundaries of a ResNet carry one, the middle of a residual block
two), and an exact dynamic programme over the candidates picks the ``k - 1``
cuts that minimise the largest stage cost ("flops" from `CostModel`,
parameter bytes for "params", measured seconds per node for "time"). Among
the splits reaching that optimum it takes the one sending the fewest
activation bytes between stages. ``get_attr`` nodes go with their first
reader, so each stage owns its weights.

Example::

    before (balance="flops", n_stages=2):      after:
        %x      = placeholder[x]                   %x        = placeholder[x]
        %conv1  = call[self.conv1](%x)             %submod_0 = call[self.submod_0](%x)
        %relu   = call[relu](%conv1)               %submod_1 = call[self.submod_1](%submod_0)
        %conv2  = call[self.conv2](%relu)          return %submod_1
        return %conv2
                                                 (submod_0: conv1, relu; submod_1: conv2)

    >>> parent = split_pipeline(resnet50(), [(8, 3, 224, 224)], n_stages=4)   # prints the stage table
    >>> Pipeline(parent, devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"], chunks=8)(x)
"""
import copy
import dataclasses
import time

from fxkit.errors import GraphError, ShapeError, format_error
from fxkit.graph import GraphModule, Interpreter
from fxkit.runtime.autograd import no_grad
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.ops.factories import randn
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor
from fxkit.tracer import symbolic_trace
from fxkit.transforms.cost import CostModel, format_count
from fxkit.transforms.infer_shapes import spec_meta
from fxkit.transforms.pipeline_cuts import balanced_cuts, crossing_values, tensor_bytes
from fxkit.transforms.split_module import split_module
from fxkit.transforms.symbolic import Sym

PIPE_SPLIT = get_op("pipe_split")
BALANCES = ("flops", "params", "time")


@dataclasses.dataclass
class StageStats:
    """What one pipeline stage holds and costs.

    Attributes:
        index: the stage's position.
        nodes: how many call nodes it runs.
        first, last: the names of its first and last call node (with the submodule
            they came from, for imported models: ``relu_3 (layer2.1)``).
        flops: FLOPs of one forward pass over the example inputs.
        param_bytes: bytes of the parameters it owns.
        sends: bytes of the tensors it sends to the next stage (for the last
            stage: the graph's outputs).
        seconds: measured forward time of its nodes (balance="time" only).
    """

    index: int
    nodes: int
    first: str
    last: str
    flops: int
    param_bytes: int
    sends: int
    seconds: float = None


def split_pipeline(model, example_inputs, n_stages=None, balance="flops", max_crossing=2, repeat=3,
                   verbose=True, console=None):
    """Split ``model`` into pipeline stages and print a table of them.

    Args:
        model: an `fxkit.nn.Module` (traced here) or a `GraphModule` (copied, not changed).
        example_inputs: one spec per forward argument: a Tensor, a shape tuple
            (float32) or a ``(shape, dtype)`` pair; a single Tensor is taken as one input.
        n_stages: the number of stages. With ``pipe_split()`` markers it may be
            omitted (one more than the markers) and must match if given.
        balance: what to balance without markers: ``"flops"``, ``"params"``
            (parameter bytes) or ``"time"`` (measured per node on the inputs).
        max_crossing: cut only where at most this many tensors cross; raised
            automatically when fewer than ``n_stages - 1`` such cuts exist.
        repeat: timing runs per node for ``balance="time"`` (the fastest counts).
        verbose: print the per-stage table (rich).
        console: a ``rich.console.Console`` to print to; defaults to stdout.

    Returns:
        The split parent `GraphModule` (see `split_module`), one child per stage,
        with the per-stage `StageStats` list in ``.stage_stats``.

    Raises:
        GraphError: unusable ``n_stages``/``balance``, an empty stage between markers,
            or more stages than nodes.
        ShapeError: the inputs' shapes are symbolic (costs must be numbers).
    """
    if balance not in BALANCES:
        raise GraphError(f"split_pipeline: balance={balance!r} is not one of {', '.join(BALANCES)}")
    gm = _traced_copy(model)
    inputs = _as_inputs(example_inputs)
    model_cost = CostModel(gm)
    model_cost.run(*(spec_meta(s) for s in inputs))
    markers = gm.graph.find_nodes(op="call", target=PIPE_SPLIT)
    units = [n for n in gm.graph.nodes if n.op == "call" and n.target is not PIPE_SPLIT]
    seconds = _node_seconds(gm, inputs, repeat) if balance == "time" else None
    crossing = crossing_values(gm.graph, units)
    if markers:
        cuts = _marker_cuts(gm.graph, markers, units, n_stages)
        limit = None
    else:
        if n_stages is None or n_stages < 1:
            raise GraphError(f"split_pipeline: n_stages must be a positive number of stages, got {n_stages!r} "
                             f"(or mark the stage ends with fxkit.pipe_split() in forward)")
        costs = _unit_costs(gm, units, balance, seconds)
        cuts, limit = balanced_cuts(costs, crossing, n_stages, max_crossing)
    for marker in markers:
        gm.graph.erase_node(marker)
    bounds = [0, *cuts, len(units)]
    stage_of = {unit: s for s in range(len(bounds) - 1) for unit in units[bounds[s]:bounds[s + 1]]}
    parent = split_module(gm, stage_of.__getitem__)
    parent.stage_stats = _stats(parent, units, bounds, crossing, seconds)
    if verbose:
        print_stage_table(parent.stage_stats, balance, limit, console)
    return parent


def _traced_copy(model):
    if isinstance(model, GraphModule):
        return GraphModule(model, copy.deepcopy(model.graph), type(model).__name__)
    return symbolic_trace(model)


def _as_inputs(example_inputs):
    if isinstance(example_inputs, (Tensor, TensorMeta)):
        return [example_inputs]
    if isinstance(example_inputs, (tuple, list)) and example_inputs and all(
            isinstance(d, (int, str, Sym)) for d in example_inputs):
        return [example_inputs]  # one shape tuple
    return list(example_inputs)


# -- costs per unit -----------------------------------------------------------------------------
def _unit_costs(gm, units, balance, seconds):
    """The cost of each unit; a get_attr's parameters count for its first reader."""
    if balance == "time":
        return [seconds[u] for u in units]
    position = {u: i for i, u in enumerate(units)}
    costs = [0] * len(units)
    seen_modules = set()
    for node in gm.graph.nodes:
        cost = node.meta.get("cost")
        if cost is None:
            continue
        if node.op == "get_attr":
            readers = [position[u] for u in node.users if u in position]
            if readers and balance == "params":
                costs[min(readers)] += cost.param_bytes
        elif node in position:
            if balance == "flops":
                costs[position[node]] += cost.flops
            elif type(node.target) is not str or node.target not in seen_modules:
                costs[position[node]] += cost.param_bytes
            if type(node.target) is str:
                seen_modules.add(node.target)
    if any(isinstance(c, Sym) for c in costs):
        raise ShapeError("split_pipeline: the example inputs have symbolic dimensions, so stage costs cannot be "
                         "compared; give concrete shapes like (8, 3, 224, 224)")
    return costs


class _NodeTimer(Interpreter):
    """Runs the graph and keeps the fastest time of each call node over the runs."""

    def __init__(self, gm):
        super().__init__(gm)
        self.seconds = {}

    def run_node(self, n):
        start = time.perf_counter()
        result = super().run_node(n)
        spent = time.perf_counter() - start
        if n.op == "call":
            self.seconds[n] = min(spent, self.seconds.get(n, spent))
        return result


def _node_seconds(gm, inputs, repeat):
    tensors = [_example_tensor(s) for s in inputs]
    timer = _NodeTimer(gm)
    with no_grad():
        for _ in range(max(1, repeat)):
            timer.run(*tensors)
    return timer.seconds


def _example_tensor(spec):
    if isinstance(spec, Tensor):
        return spec
    meta = spec_meta(spec)
    if any(not isinstance(d, int) for d in meta.shape) or not meta.dtype.is_floating_point:
        raise ShapeError(f"split_pipeline: balance='time' runs the model, so it needs example tensors (or "
                         f"concrete floating shapes), got {spec!r}")
    return randn(*meta.shape, dtype=meta.dtype)


# -- cuts at markers -------------------------------------------------------------------------------
def _marker_cuts(graph, markers, units, n_stages):
    if n_stages is not None and n_stages != len(markers) + 1:
        raise GraphError(f"split_pipeline: the model has {len(markers)} pipe_split() markers, i.e. "
                         f"{len(markers) + 1} stages, but n_stages={n_stages}; drop n_stages or the markers")
    position = {u: i for i, u in enumerate(units)}
    cuts, seen = [], 0
    for node in graph.nodes:
        if node in position:
            seen += 1
        elif node.target is PIPE_SPLIT and node.op == "call":
            previous = cuts[-1] if cuts else 0
            if seen == previous or seen == len(units):
                raise GraphError(format_error(
                    "split_pipeline: this pipe_split() marker leaves an empty stage", where=node.stack,
                    node=node.format_node(),
                    hint="put at least one operation between two markers and between a marker and either end "
                         "of forward"))
            cuts.append(seen)
    return cuts


# -- the table --------------------------------------------------------------------------------------
def _stats(parent, units, bounds, crossing, seconds):
    stats = []
    children = [parent.get_submodule(n.target) for n in parent.graph.find_nodes(op="call")
                if type(n.target) is str]
    for s, child in enumerate(children):
        members = units[bounds[s]:bounds[s + 1]]
        flops = sum(m.meta["cost"].flops for m in members if "cost" in m.meta)
        param_bytes = sum(p.nbytes() for p in child.parameters())
        time_s = sum(seconds[m] for m in members) if seconds is not None else None
        stats.append(StageStats(s, len(members), _label(members[0]), _label(members[-1]), flops, param_bytes,
                                tensor_bytes(crossing[bounds[s + 1]]), time_s))
    return stats


def _label(node):
    """A node's name, with the imported model's submodule it came from (``relu_3 (layer2.1)``)."""
    return f"{node.name} ({node.module_path})" if node.module_path else node.name


def print_stage_table(stats, balance="flops", limit=None, console=None):
    """Print `StageStats` as a rich table with the balance of the chosen measure.

    Args:
        stats: the stages' `StageStats`.
        balance: the measure whose largest/mean ratio the caption reports.
        limit: the crossing limit the cuts obeyed (None for marker cuts).
        console: a ``rich.console.Console``; defaults to stdout.
    """
    from rich.console import Console  # rich loads slowly; only the table needs it
    from rich.table import Table

    timed = any(s.seconds is not None for s in stats)
    columns = ["stage", "nodes", "first → last", "FLOPs", "param bytes", "sends"] + (["time"] if timed else [])
    table = Table(*columns, title=f"pipeline: {len(stats)} stages")
    for s in stats:
        row = [str(s.index), str(s.nodes), f"{s.first} → {s.last}", format_count(s.flops),
               format_count(s.param_bytes, "B"),
               format_count(s.sends, "B") + (" (output)" if s.index == len(stats) - 1 else "")]
        if timed:
            row.append(f"{s.seconds * 1e3:.2f} ms")
        table.add_row(*row)
    measure = {"flops": "flops", "params": "param_bytes", "time": "seconds"}[balance]
    values = [getattr(s, measure) or 0 for s in stats]
    mean = sum(values) / len(values)
    ratio = max(values) / mean if mean else 1.0
    how = "at pipe_split() markers" if limit is None else f"by {balance}, cuts with at most {limit} tensors crossing"
    table.caption = f"split {how}; largest stage / mean {balance} = {ratio:.3f}"
    (console or Console()).print(table)
