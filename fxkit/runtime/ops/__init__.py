"""The op families. Importing this package registers every op."""
from fxkit.runtime.ops import (  # noqa: F401  (imported for registration)
    elementwise_binary,
    elementwise_unary,
    casts,
    factories,
    indexing,
    linalg,
    reductions,
    softmax,
    shape_ops,
    rearrange,
    norm_ops,
    loss_ops,
    nn_misc_ops,
    conv,
    pooling,
    interpolate,
)
