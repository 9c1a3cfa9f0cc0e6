"""`Embedding`: a lookup table of vectors indexed by integer ids."""
from fxkit.runtime.nn import functional as F
from fxkit.runtime.nn import init
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.ops.factories import empty


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) picked by integer ids.

    Args:
        num_embeddings: size of the table.
        embedding_dim: size of each vector.
        padding_idx: this row is initialised to zeros (and gets no gradient).
        max_norm: rows looked up with a larger ``norm_type``-norm are rescaled
            in place to ``max_norm``.
        norm_type: the p of the p-norm for ``max_norm``.
        scale_grad_by_freq, sparse: gradient options, kept for PyTorch parity.
        _weight: an initial table to use instead of N(0, 1) samples.
        _freeze: create ``weight`` with ``requires_grad=False``.

    Example:
        >>> nn.Embedding(10, 3)(fxkit.tensor([[1, 2], [4, 5]])).shape
        (2, 2, 3)
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None):
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx={padding_idx} must be within num_embeddings="
                                 f"{num_embeddings} (in [{-num_embeddings}, {num_embeddings - 1}])")
            padding_idx = padding_idx % num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: _weight has shape {list(_weight.shape)}, expected "
                                 f"[{num_embeddings}, {embedding_dim}] (num_embeddings, embedding_dim)")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq is not False:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        if self.sparse is not False:
            s += ", sparse=True"
        return s

    def _init_kwargs(self):
        return {"num_embeddings": self.num_embeddings, "embedding_dim": self.embedding_dim,
                "padding_idx": self.padding_idx, "max_norm": self.max_norm, "norm_type": self.norm_type,
                "scale_grad_by_freq": self.scale_grad_by_freq, "sparse": self.sparse}
