"""Every zoo model traces, and every execution path of the traced module equals eager exactly."""
import numpy as np
import pytest

import fxkit
import fxkit.models
from tests.tracer.paths import check_all_paths

SLOW = {"resnet18", "resnet50", "transformer_block"}


def small_batch(shape):
    """The zoo's example shape with batch 2 and images at most 32x32, to keep the test quick."""
    return (2, *shape[1:-2], *(min(d, 32) for d in shape[-2:])) if len(shape) == 4 else (2, *shape[1:])


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else [])
                                  for n in fxkit.models.names()])
def test_zoo_model_traces_and_runs_equal_to_eager(name, rng, tmp_path):
    model, shapes = fxkit.models.get(name)
    inputs = tuple(fxkit.from_numpy(rng.standard_normal(small_batch(s)).astype(np.float32)) for s in shapes)
    gm = check_all_paths(model, inputs, tmp_path)
    calls = gm.graph.find_nodes(op="call")
    assert calls, "nothing was recorded"
    for node in calls:  # every node carries the line of the zoo's forward it came from
        assert node.stack is not None and node.stack.filename.endswith(".py")
    leaves = {n.target for n in calls if isinstance(n.target, str)}
    for qualname in leaves:  # built-in layers stay whole
        assert type(gm.get_submodule(qualname)).__module__.startswith("fxkit.runtime.nn")


def test_resnet_graph_shape():
    model, _ = fxkit.models.get("resnet18")
    gm = fxkit.symbolic_trace(model)
    convs = [n for n in gm.graph.find_nodes(op="call") if n.is_module(gm, fxkit.nn.Conv2d)]
    assert len(convs) == 20  # 1 stem + 16 in blocks + 3 downsample
    adds = gm.graph.find_nodes(op="call", target=fxkit.ops.add)
    assert len(adds) == 8  # one residual add per BasicBlock
