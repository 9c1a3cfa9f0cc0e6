"""Cases for fxkit/runtime/ops/pipe_split.py: the pipeline-stage marker computes nothing.

What the marker does in a traced graph is tested in tests/transforms/test_split_pipeline.py.
"""
from tests.runtime.opcheck import case

case("pipe_split", lambda r: ((), {}), lambda: None, id="eager_returns_none")
