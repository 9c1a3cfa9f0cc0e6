"""``fxkit.utils``: training utilities (``fxkit.utils.data``), like ``torch.utils``."""
from fxkit.utils import data

__all__ = ["data"]
