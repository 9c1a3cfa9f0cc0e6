"""``fxkit.pipe_split()``: a marker in a model's ``forward`` where a pipeline stage ends.

It computes nothing: eagerly it returns None, so the model runs unchanged.
While a model is traced the marker is recorded as a ``call[pipe_split]()``
node even though it has no tensor argument to carry a proxy (ops are normally
recorded only through their proxy arguments), and `split_pipeline` cuts the
graph exactly at those nodes. The op is impure, so dead-code elimination,
CSE and constant folding keep it in place.

Example:
    >>> def forward(self, x):
    ...     x = self.encoder(x)
    ...     fxkit.pipe_split()          # stage 0 ends here
    ...     return self.decoder(x)
"""
from fxkit.errors import TraceError
from fxkit.runtime.op import Op
from fxkit.runtime.registry import add_op
from fxkit.runtime.tracing_hook import ACTIVE


class _MarkerOp(Op):
    """An op without inputs that a running trace records wherever it is called."""

    __slots__ = ()

    def __call__(self, *args, **kwargs):
        if args or kwargs:
            raise TraceError(f"{self.name}() takes no arguments; call it alone on a line of forward "
                             f"where one pipeline stage should end")
        if ACTIVE:
            return ACTIVE[-1].record_op(self, (), {})
        return None


def _pipe_split(xp):
    """Does nothing: the marker matters only in a traced graph."""
    return None


pipe_split = add_op(_MarkerOp("pipe_split", _pipe_split, kind="other", shape_rule=lambda: None,
                              method=False, pure=False))
