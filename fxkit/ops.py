"""``fxkit.ops``: every registered `Op` by name (``fxkit.ops.relu``)."""
import fxkit.runtime  # noqa: F401  (registers every op)
from fxkit.runtime.registry import all_ops as _all_ops

globals().update({_op.name: _op for _op in _all_ops()})
__all__ = [_op.name for _op in _all_ops()]
