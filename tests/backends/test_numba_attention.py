"""The numba backend's attention (fxkit/backends/numba_attention.py) against attention in float64.

Every mask form the op takes (none, bool broadcast over heads, a padding mask,
a fully masked row, float added, causal with a longer query or key, a scale),
compiled through numba and checked against the float64 reference of the op
cases; the lowering choice is checked in ``explain()``, and the forms it leaves
to the registry op (dropout, grouped heads, float64) still match.
"""
import numpy as np
import pytest

import fxkit
from fxkit.nn import functional as F
from tests.runtime.cases.attention import sdpa_ref

pytest.importorskip("numba")

TOL = {"rtol": 1e-5, "atol": 1e-6}


def _qkv(rng, n=2, heads=3, length=5, source=7, dim=8, value_dim=6, kv_heads=None, dtype=np.float32):
    kv_heads = heads if kv_heads is None else kv_heads
    return [(rng.random(s) * 4 - 2).astype(dtype) for s in
            ((n, heads, length, dim), (n, kv_heads, source, dim), (n, kv_heads, source, value_dim))]


def _padding_mask(n, length, source):
    keep = np.ones((n, 1, length, source), bool)
    keep[-1, :, :, source // 2:] = False
    return keep


def _fully_masked_row(rng, n, length, source):
    keep = rng.random((n, 1, length, source)) > 0.3
    keep[0, 0, 1] = False
    return keep


MASKS = {
    "none": lambda rng, n, length, source: None,
    "bool-random": lambda rng, n, length, source: rng.random((n, 1, length, source)) > 0.4,
    "bool-padding": lambda rng, n, length, source: _padding_mask(n, length, source),
    "fully-masked-row": _fully_masked_row,
    "float-added": lambda rng, n, length, source: (rng.random((1, 1, length, source)) * 2 - 1).astype(np.float32),
    "float-per-head": lambda rng, n, length, source: (rng.random((n, 3, length, source)) * 2).astype(np.float32),
}


def _compiled_attention(arrays, **options):
    """The numba compilation of attention on ``arrays`` (q, k, v[, mask]) and its output."""
    def attention(q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options)

    tensors = [fxkit.from_numpy(a) for a in arrays]
    compiled = fxkit.compile(attention, backend="numba", example_inputs=tensors)
    return compiled, compiled(*tensors).numpy()


@pytest.mark.parametrize("mask", list(MASKS))
def test_masks_match_float64_reference(mask, rng):
    q, k, v = _qkv(rng)
    m = MASKS[mask](rng, 2, 5, 7)
    arrays = [q, k, v] + ([] if m is None else [m])
    compiled, out = _compiled_attention(arrays)
    assert "numba softmax" in compiled.explain()
    expected = sdpa_ref(*(a.astype(np.float64) if a.dtype != bool else a for a in arrays))
    np.testing.assert_allclose(out, expected, **TOL)


@pytest.mark.parametrize("length,source", [(5, 7), (7, 5), (6, 6)])
def test_causal_matches_float64_reference(length, source, rng):
    q, k, v = _qkv(rng, length=length, source=source)
    compiled, out = _compiled_attention([q, k, v], is_causal=True)
    assert "numba softmax" in compiled.explain()
    expected = sdpa_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), is_causal=True)
    np.testing.assert_allclose(out, expected, **TOL)


def test_scale_and_three_dims_and_noncontiguous_inputs(rng):
    q, k, v = _qkv(rng, n=1)
    q, k, v = q[0], k[0], v[0]  # (heads, length, dim): leading dims other than two
    k = np.swapaxes(np.swapaxes(k, 0, 1).copy(), 0, 1)  # a permuted view, as imported models pass
    compiled, out = _compiled_attention([q, k, v], scale=0.3)
    assert "numba softmax" in compiled.explain()
    expected = sdpa_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), scale=0.3)
    np.testing.assert_allclose(out, expected, **TOL)


def test_grouped_heads_and_float64_keep_the_registry_op(rng):
    q, k, v = _qkv(rng, heads=4, kv_heads=2)
    compiled, out = _compiled_attention([q, k, v], enable_gqa=True)
    assert "attention: dropout or grouped heads" in compiled.explain()
    expected = sdpa_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), enable_gqa=True)
    np.testing.assert_allclose(out, expected, **TOL)
    arrays = _qkv(rng, dtype=np.float64)
    compiled, out = _compiled_attention(arrays)
    assert "attention: not float32" in compiled.explain()
    np.testing.assert_allclose(out, sdpa_ref(*arrays), rtol=1e-12, atol=1e-14)
