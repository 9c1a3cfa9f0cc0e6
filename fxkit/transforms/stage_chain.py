"""`stage_chain`: a split module as a chain of stages that hand values down the line.

A pipeline runs stage ``i`` only with what stage ``i - 1`` sends it, but a
child of `split_module` may read a value computed two stages earlier (a
residual connection) or a graph input (the LSTM cell's ``cx``). The chain
makes every such value explicit: stage ``i`` receives the values live across
its left boundary, runs its child, and sends on the values live across its
right boundary (its own results and the ones it passes through). The last
stage sends what the parent's output reads.

Example::

    parent:  %x = placeholder[x]; %submod_0 = call[submod_0](%x)
             %submod_1 = call[submod_1](%submod_0, %x); return %submod_1
    chain:   stage 0 receives (x), runs submod_0, sends (submod_0, x)
             stage 1 receives (submod_0, x), runs submod_1, sends (submod_1)
"""
import dataclasses

from fxkit.errors import GraphError
from fxkit.graph import fetch_attr, map_arg


@dataclasses.dataclass
class ChainStage:
    """One stage of a chain.

    Attributes:
        index: the stage's position.
        module: the child module it runs (moved to its device by executors).
        nodes: the parent's nodes it runs: the child's call and the picks of its results.
        inputs: the parent nodes whose values it receives, in message order.
        outputs: the parent nodes whose values it sends on, in message order.
    """

    index: int
    module: object
    nodes: list
    inputs: list
    outputs: list

    @property
    def input_names(self):
        """The names of the values the stage receives."""
        return [n.name for n in self.inputs]

    @property
    def output_names(self):
        """The names of the values the stage sends on."""
        return [n.name for n in self.outputs]


class StageChain:
    """A split parent `GraphModule` cut into `ChainStage`s at the calls of its children.

    Args:
        parent: a module made by `split_module` (or `split_pipeline`).

    Attributes:
        stages: the `ChainStage` list, in call order.
        placeholders: the parent's graph inputs (stage 0 receives those it reads).
    """

    def __init__(self, parent):
        graph = parent.graph
        self.parent = parent
        self.placeholders = graph.find_nodes(op="placeholder")
        self._output = graph.output_node()
        segments, pending = [], []
        for node in graph.nodes:
            if node.op == "call" and type(node.target) is str:
                segments.append(pending + [node])
                pending = []
            elif node.op in ("call", "get_attr"):
                (segments[-1] if segments else pending).append(node)
        if not segments:
            raise GraphError("StageChain: the module calls no child module; split it first "
                             "(split_module or split_pipeline)")
        where = {node: i for i, seg in enumerate(segments) for node in seg}
        last_use = {}
        for node in graph.nodes:
            reader = len(segments) if node.op == "output" else where.get(node)
            for used in node.all_input_nodes:
                if reader is not None:
                    last_use[used] = max(last_use.get(used, -1), reader)
        self.stages = []
        for i, seg in enumerate(segments):
            live_in = [n for n in self._defined_before(i, segments) if last_use.get(n, -1) >= i]
            live_out = [n for n in self._defined_before(i + 1, segments) if last_use.get(n, -1) > i]
            module = next(parent.get_submodule(n.target) for n in seg if n.op == "call" and type(n.target) is str)
            self.stages.append(ChainStage(i, module, seg, live_in, live_out))

    def _defined_before(self, i, segments):
        found = list(self.placeholders)
        for seg in segments[:i]:
            found.extend(seg)
        return found

    def __len__(self):
        return len(self.stages)

    def first_inputs(self, args):
        """The values stage 0 receives, from the parent's positional ``args`` (defaults filled in)."""
        if len(args) > len(self.placeholders):
            raise GraphError(f"{type(self.parent).__name__}: takes {len(self.placeholders)} inputs "
                             f"({', '.join(p.name for p in self.placeholders)}), got {len(args)}")
        env = {}
        for i, node in enumerate(self.placeholders):
            if i < len(args):
                env[node] = args[i]
            elif node.args:
                env[node] = node.args[0]
            else:
                raise GraphError(f"{type(self.parent).__name__}: missing a value for the input {node.name!r}; pass "
                                 f"one value per input ({', '.join(p.name for p in self.placeholders)})")
        return [env[n] for n in self.stages[0].inputs]

    def run_stage(self, index, values):
        """Run stage ``index`` on the values it receives; returns the values it sends on."""
        stage = self.stages[index]
        env = dict(zip(stage.inputs, values))
        for node in stage.nodes:
            args = map_arg(node.args, env.__getitem__)
            kwargs = map_arg(node.kwargs, env.__getitem__)
            if node.op == "get_attr":
                env[node] = fetch_attr(self.parent, node.target)
            elif type(node.target) is str:
                env[node] = stage.module(*args, **kwargs)
            else:
                env[node] = node.target(*args, **kwargs)
        return [env[n] for n in stage.outputs]

    def assemble(self, values):
        """The parent's output from the values the last stage sends."""
        env = dict(zip(self.stages[-1].outputs, values))
        return map_arg(self._output.args[0], env.__getitem__) if self._output.args else None
