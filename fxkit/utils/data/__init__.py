"""``fxkit.utils.data``: datasets and the `DataLoader`, with ``torch.utils.data``'s API.

Example:
    >>> from fxkit.utils.data import DataLoader, TensorDataset
    >>> loader = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True)
"""
from fxkit.utils.data.collate import default_collate, default_convert
from fxkit.utils.data.dataloader import DataLoader
from fxkit.utils.data.dataset import Dataset, IterableDataset, TensorDataset

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "DataLoader", "default_collate", "default_convert"]
