"""Bucket layout: small gradients share a buffer up to the cap, a gradient of the cap or more has a bucket of
its own, buckets are numbered in the order their last gradient arrives, and no two gradients overlap."""
import numpy as np

from fxkit.distributed.buckets import Buckets


def test_buckets_are_numbered_in_the_order_they_fill_and_a_large_gradient_stands_alone():
    # float32: 4-byte elements, cap 64 bytes = 16 elements
    shapes = [(2,), (4, 8), (3,), (5,), (16,), (2, 2)]
    order = [0, 1, 2, 3, 4, 5]  # the order gradients arrive in
    buckets = Buckets(shapes, [np.float32] * 6, order, cap_bytes=64)
    # 1 (32 elements) and 4 (16) reach the cap alone; 0, 2, 3, 5 (14 elements) share one, which opened first but
    # fills last (with 5), so it is numbered last: the ranks never wait on it to start the others
    assert buckets.members == [[1], [4], [0, 2, 3, 5]]
    assert buckets.alone == [True, True, False]
    views = {i: buckets.view(i) for i in range(6)}
    for i, v in views.items():
        assert v.shape == shapes[i]
        v[...] = i + 1
    for i, v in views.items():
        np.testing.assert_array_equal(v, np.full(shapes[i], i + 1, np.float32))  # nothing overwrote it


def test_each_dtype_has_its_own_buckets():
    shapes = [(3,), (3,), (3,)]
    buckets = Buckets(shapes, [np.float32, np.float64, np.float32], [2, 1, 0], cap_bytes=1024)
    assert sorted(buckets.members) == [[1], [2, 0]]
    assert {buckets.dtypes[b] for b in range(len(buckets))} == {np.dtype(np.float32), np.dtype(np.float64)}
    assert buckets.view(1).dtype == np.float64 and buckets.view(0).dtype == np.float32
