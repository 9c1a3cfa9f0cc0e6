"""The op families. Importing this package registers every op."""
from fxkit.runtime.ops import (  # noqa: F401  (imported for registration)
    elementwise_binary,
    elementwise_unary,
    casts,
    factories,
    indexing,
    linalg,
    reductions,
    shape_ops,
)
