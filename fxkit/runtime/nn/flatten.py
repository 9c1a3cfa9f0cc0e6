"""`Flatten`: merge dimensions ``start_dim..end_dim`` into one."""
from fxkit.runtime.nn.module import Module
from fxkit.runtime.registry import get_op

_flatten = get_op("flatten")


class Flatten(Module):
    """Flatten ``start_dim`` through ``end_dim`` (default: all but the batch dimension).

    Example:
        >>> nn.Flatten()(fxkit.randn(32, 1, 5, 5)).shape
        (32, 25)
    """

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return _flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"

    def _init_kwargs(self):
        return {"start_dim": self.start_dim, "end_dim": self.end_dim}
