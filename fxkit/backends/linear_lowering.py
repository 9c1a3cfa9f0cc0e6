"""How the numba backend runs ``linear``: BLAS against the weight packed ``(in, out)``, or, over few
rows, a numba kernel streaming the weight.

The registry's ``linear`` multiplies by ``weight.T``, a transposed view of
PyTorch's ``(out_features, in_features)`` layout: no copy, but OpenBLAS then
packs the transposed operand on every call, which costs most where the rows
are few (a ViT's 17 tokens, a transformer block's 64): the same product
against the weight stored ``(in_features, out_features)`` C-contiguous took
0.70x the time at ``(17, 3072) @ (3072, 768)`` and 0.77x at
``(64, 128) @ (128, 512)`` (one thread, minimum of 30 runs), and 0.87x to
1.0x at 136 rows and more, with the weight in cache. Inside a model whose
weights stream from memory every call (ViT-B/16) the copy lost (see
`PACK_MAX_BYTES`), so only weights up to that size get one. `LinearCall`
keeps that copy of each such parameter weight, made on the first call and
again after any tensor was written in place (`fxkit.backends.packed_weight`:
an optimizer step may have changed the weight), as the conv rules keep theirs.

With few rows (at most `FEW_ROWS`) and a long enough dot product (at least
`FEW_ROWS_MIN_DEPTH`), the product is a stream of the weight instead, and
when numba runs on one thread at lowering `LinearCall` runs
`fxkit.backends.numba_linear`'s kernel on the weight as it is (no copy), the
bias added as it stores: ViT-B/16 at batch 1 (17 rows) ran in 0.73x the
time of its BLAS forward (one thread; 0.60x for ConvNeXt-T at batch 1, whose
last two stages have 16 and 4 rows). With more threads BLAS keeps the product:
the kernel spread over numba's threads lost inside models (see that module).
The thread count is read once, at lowering, as the conv rules' choices are:
asking numba for it on every call cost 0.67 us, the zoo MLP's whole margin
over the numpy backend at batch 1.

`LINEAR_RULES` maps the registry op to its rule, as `CONV_RULES` does for
``conv2d``. The rule takes a ``linear`` whose weight is a 2-D float32 or
float64 parameter or buffer (a ``get_attr``) and whose input has at least
one dimension; a weight computed at run time would be copied on every call,
so such a node keeps the registry op.
"""
import math

import numpy as np

from fxkit.backends.cost_model import Decision
from fxkit.backends.packed_weight import packed_weight
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op

_FLOATS = ("float32", "float64")
PACK_MAX_BYTES = 1 << 20
"""Largest weight kept as an ``(in, out)`` copy. The copy won where the weights stay in cache (a
transformer block of embed 128 at batch 1: 0.85x the forward's time, 2 threads); ViT-B/16's 2.4 to
9.4 MB weights, streamed from memory every call, ran 1.07x to 1.12x slower with it (batch 1 and 8,
2 threads, load average 1.3), so larger weights keep BLAS's transposed read."""
FEW_ROWS = 24
"""Input rows up to which the few-rows kernel streams the weight (17 rows: 0.76x to 0.89x OpenBLAS's
time on one thread; 32 rows: no gain)."""
FEW_ROWS_MIN_DEPTH = 256
"""Least ``in_features`` for the few-rows kernel: shorter dot products spend their time in the sums'
final reductions (``(8, 64) @ (64, 64)``: 3x numpy's time)."""


class LinearCall:
    """``linear(input, weight[, bias])`` on raw arrays, the weight read from its ``(in, out)`` copy, or
    over few rows on one thread by `fxkit.backends.numba_linear`'s kernel.

    Args:
        name: the name generated code calls it by.
        pack: whether BLAS multiplies by the ``(in, out)`` copy (else by ``weight.T``).
        few_rows: ``(result shape, dtype)`` when the few-rows kernel runs the node, else None.
    """

    __slots__ = ("__name__", "_pack", "_weight", "_writes", "_packed", "_shape", "_zeros", "_kernel")

    def __init__(self, name, pack, few_rows=None):
        self.__name__ = name
        self._pack = pack
        self._weight, self._writes, self._packed = None, None, None
        self._shape = self._zeros = self._kernel = None
        if few_rows is not None:
            from fxkit.backends import numba_linear  # NOTE: numba loads only when this kernel may run

            self._shape, dtype = few_rows
            self._zeros = np.zeros(self._shape[-1], dtype)
            self._kernel = numba_linear.few_rows_linear
            numba_linear.warm(dtype)

    def __call__(self, input, weight, bias=None):  # noqa: A002
        if self._kernel is not None:
            rows = np.ascontiguousarray(input.reshape(-1, input.shape[-1]))
            out = np.empty(self._shape, rows.dtype)
            self._kernel(out.reshape(rows.shape[0], -1), rows, np.ascontiguousarray(weight),
                         self._zeros if bias is None else bias)
            return out
        operand = packed_weight(self, weight, np.transpose) if self._pack else weight.T
        # NOTE: more than 2 dims run as one (rows, in_features) product (see the registry's linear).
        rows = input.reshape(math.prod(input.shape[:-1]), input.shape[-1]) if input.ndim != 2 else input
        out = np.matmul(rows, operand)
        if input.ndim != 2:
            out = out.reshape(input.shape[:-1] + (weight.shape[0],))
        if bias is not None:
            out += bias
        return out

    def __repr__(self):
        return f"<LinearCall {self.__name__}>"


def lower_linear(node):
    """``(LinearCall or None, Decision)`` for a ``linear`` node (see the module docstring).

    A node it takes gets its bias as a third positional argument (generated code
    passes a call its node's positional arguments only).
    """
    given = dict(zip(("input", "weight", "bias"), node.args), **node.kwargs)
    weight, bias = given.get("weight"), given.get("bias")
    metas = [getattr(given.get(k), "meta", {}).get("tensor_meta") for k in ("input", "weight")]
    reason = None
    if set(given) - {"input", "weight", "bias"}:
        reason = "unexpected keyword arguments"
    elif not all(isinstance(m, TensorMeta) for m in metas):
        reason = "an operand's metadata is unknown"
    elif getattr(weight, "op", None) != "get_attr":
        reason = "the weight is computed at run time (its (in, out) copy would be made every call)"
    elif len(metas[1].shape) != 2 or len(metas[0].shape) < 1:
        reason = f"a {len(metas[1].shape)}-D weight or a 0-d input"
    elif metas[0].dtype.name not in _FLOATS or metas[1].dtype.name != metas[0].dtype.name:
        reason = f"{metas[0].dtype.name} input and {metas[1].dtype.name} weight (the rule takes float32/float64)"
    if reason is not None:
        return None, Decision(node.name, "numpy linear", reason)
    node.args = (given["input"], weight) + ((bias,) if bias is not None else ())
    node.kwargs = {}
    out_features, in_features = metas[1].shape
    leading = metas[0].shape[:-1]
    bias_meta = getattr(bias, "meta", {}).get("tensor_meta") if bias is not None else None
    out = node.meta.get("tensor_meta")
    pack = out_features * in_features * metas[1].dtype.np.itemsize <= PACK_MAX_BYTES
    if (all(isinstance(d, int) for d in leading) and math.prod(leading) <= FEW_ROWS
            and in_features >= FEW_ROWS_MIN_DEPTH and isinstance(out, TensorMeta)
            and (bias is None or (isinstance(bias_meta, TensorMeta) and tuple(bias_meta.shape) == (out_features,)))):
        from fxkit.backends.numba_linear import single_threaded  # NOTE: numba is loaded by the backend already

        if single_threaded():
            call = LinearCall(f"{node.name}_few_rows", pack, (tuple(out.shape), out.dtype.np))
            return call, Decision(node.name, f"numba kernel {call.__name__}",
                                  f"{math.prod(leading)} rows on one numba thread: the ({out_features}, "
                                  f"{in_features}) weight streamed once")
    if not pack:
        return None, Decision(node.name, "numpy linear", f"the {out_features}x{in_features} weight streams from "
                                                         f"memory: BLAS reads weight.T")
    call = LinearCall(f"{node.name}_packed", pack)
    return call, Decision(node.name, f"BLAS product {call.__name__}",
                          f"weight kept as ({in_features}, {out_features}) C-contiguous: OpenBLAS packs a "
                          f"transposed operand on every call")


LINEAR_RULES = {get_op("linear"): lower_linear}
"""Registry op -> ``rule(node) -> (call or None, Decision)``: how the numba backend runs that op."""
