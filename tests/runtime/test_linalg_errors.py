"""Error messages of the linear-algebra ops: each names the op and the shapes or
dtypes involved, in PyTorch's wording where it has one; shape rules raise the same."""
import numpy as np
import pytest

import fxkit
from fxkit import ops
from fxkit.errors import DTypeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from tests.runtime.opcheck import randf, randi


def t(array):
    return fxkit.from_numpy(array)


def meta(*shape, dtype=fxkit.float32):
    return TensorMeta(shape, dtype)


MISMATCH = r"matmul: mat1 and mat2 shapes cannot be multiplied \(64x320 and 500x10\)"


# -- matmul ------------------------------------------------------------------------
def test_matmul_mismatch_has_pytorchs_exact_message(rng):
    with pytest.raises(ShapeError) as info:
        ops.matmul(t(randf(rng, 64, 320)), t(randf(rng, 500, 10)))
    assert str(info.value) == "matmul: mat1 and mat2 shapes cannot be multiplied (64x320 and 500x10)"


def test_matmul_operator_and_shape_rule_give_the_same_message(rng):
    with pytest.raises(ShapeError, match=MISMATCH):
        t(randf(rng, 64, 320)) @ t(randf(rng, 500, 10))
    with pytest.raises(ShapeError, match=MISMATCH):
        ops.matmul.shape_rule(meta(64, 320), meta(500, 10))


def test_matmul_batched_mismatch_shows_the_matrix_dims(rng):
    with pytest.raises(ShapeError, match=r"cannot be multiplied \(3x4 and 5x6\)"):
        ops.matmul(t(randf(rng, 2, 3, 4)), t(randf(rng, 2, 5, 6)))


def test_matmul_batch_dims_that_do_not_broadcast(rng):
    with pytest.raises(ShapeError, match=r"matmul: shapes \[2\] and \[3\] cannot be broadcast"):
        ops.matmul(t(randf(rng, 2, 3, 4)), t(randf(rng, 3, 4, 5)))


def test_matmul_of_a_0d_tensor(rng):
    with pytest.raises(ShapeError, match=r"matmul: both arguments need at least 1 dimension, "
                                         r"got shapes \[\] and \[3\]"):
        ops.matmul(t(randf(rng, 1).reshape(())), t(randf(rng, 3)))


def test_matmul_dtype_mismatch_names_both_dtypes(rng):
    with pytest.raises(DTypeError, match=r"matmul: expected all inputs to have the same dtype, got float32 and "
                                         r"float64; cast with .to\(\)"):
        ops.matmul(t(randf(rng, 3, 4)), t(randf(rng, 4, 5, dtype=np.float64)))
    with pytest.raises(DTypeError, match=r"got float32 and float64"):
        ops.matmul.shape_rule(meta(3, 4), meta(4, 5, dtype=fxkit.float64))


# -- mm, bmm -----------------------------------------------------------------------
def test_mm_on_3d_names_the_argument_and_shape(rng):
    with pytest.raises(ShapeError, match=r"mm: self must be a 2-D tensor, got shape \[2, 3, 4\]"):
        ops.mm(t(randf(rng, 2, 3, 4)), t(randf(rng, 4, 5)))
    with pytest.raises(ShapeError, match=r"mm: mat2 must be a 2-D tensor, got shape \[4\]"):
        ops.mm.shape_rule(meta(3, 4), meta(4))


def test_mm_mismatch(rng):
    with pytest.raises(ShapeError, match=r"mm: mat1 and mat2 shapes cannot be multiplied \(3x4 and 5x5\)"):
        ops.mm(t(randf(rng, 3, 4)), t(randf(rng, 5, 5)))


def test_bmm_batch_mismatch_names_both_batch_sizes(rng):
    message = (r"bmm: batch1 and batch2 must have the same batch size, got 2 and 3 "
               r"\(shapes \[2, 3, 4\] and \[3, 4, 5\]\)")
    with pytest.raises(ShapeError, match=message):
        ops.bmm(t(randf(rng, 2, 3, 4)), t(randf(rng, 3, 4, 5)))
    with pytest.raises(ShapeError, match=message):
        ops.bmm.shape_rule(meta(2, 3, 4), meta(3, 4, 5))


def test_bmm_needs_3d_and_matching_inner_dims(rng):
    with pytest.raises(ShapeError, match=r"bmm: batch1 must be a 3-D tensor, got shape \[3, 4\]"):
        ops.bmm(t(randf(rng, 3, 4)), t(randf(rng, 2, 4, 5)))
    with pytest.raises(ShapeError, match=r"bmm: mat1 and mat2 shapes cannot be multiplied \(3x4 and 5x5\)"):
        ops.bmm(t(randf(rng, 2, 3, 4)), t(randf(rng, 2, 5, 5)))


# -- linear ------------------------------------------------------------------------
def test_linear_in_features_mismatch_names_both_numbers(rng):
    x, w = t(randf(rng, 64, 320)), t(randf(rng, 10, 500))
    with pytest.raises(ShapeError) as info:
        ops.linear(x, w, t(randf(rng, 10)))
    message = str(info.value)
    assert message.startswith("linear: mat1 and mat2 shapes cannot be multiplied (64x320 and 500x10)")
    assert "the input's last dimension is 320" in message
    assert "in_features=500" in message and "[10, 500]" in message
    with pytest.raises(ShapeError, match=r"last dimension is 320 .* in_features=500"):
        ops.linear.shape_rule(meta(64, 320), meta(10, 500))


def test_linear_flattens_leading_dims_in_the_message_like_pytorch(rng):
    with pytest.raises(ShapeError, match=r"cannot be multiplied \(6x4 and 3x5\)"):
        ops.linear(t(randf(rng, 2, 3, 4)), t(randf(rng, 5, 3)))


def test_linear_bias_that_does_not_fit(rng):
    with pytest.raises(ShapeError, match=r"linear: bias of shape \[7\] cannot be broadcast to the "
                                         r"product's shape \[2, 5\]"):
        ops.linear(t(randf(rng, 2, 4)), t(randf(rng, 5, 4)), t(randf(rng, 7)))


def test_linear_weight_rank_and_0d_input(rng):
    with pytest.raises(ShapeError, match=r"linear: weight must be 1-D or 2-D \(out_features, in_features\), "
                                         r"got shape \[2, 3, 4\]"):
        ops.linear.shape_rule(meta(2, 4), meta(2, 3, 4))
    with pytest.raises(ShapeError, match=r"linear: the input must have at least 1 dimension .* got a 0-d tensor"):
        ops.linear(t(randf(rng, 1).reshape(())), t(randf(rng, 5, 4)))


def test_linear_dtype_mismatch(rng):
    with pytest.raises(DTypeError, match=r"linear: expected all inputs to have the same dtype, got float32 and "
                                         r"float32 and float64"):
        ops.linear(t(randf(rng, 2, 4)), t(randf(rng, 5, 4)), t(randf(rng, 5, dtype=np.float64)))


# -- addmm, baddbmm ----------------------------------------------------------------
def test_addmm_input_that_does_not_broadcast(rng):
    message = r"addmm: input of shape \[4, 5\] cannot be broadcast to the product's shape \[3, 5\]"
    with pytest.raises(ShapeError, match=message):
        ops.addmm(t(randf(rng, 4, 5)), t(randf(rng, 3, 4)), t(randf(rng, 4, 5)))
    with pytest.raises(ShapeError, match=message):
        ops.addmm.shape_rule(meta(4, 5), meta(3, 4), meta(4, 5))


def test_addmm_float_scalars_with_integer_tensors(rng):
    with pytest.raises(DTypeError, match=r"addmm: beta=1 and alpha=1.5 must be integers for integer tensors "
                                         r"\(int64\)"):
        ops.addmm(t(randi(rng, 3, 5)), t(randi(rng, 3, 4)), t(randi(rng, 4, 5)), alpha=1.5)


def test_baddbmm_shapes(rng):
    with pytest.raises(ShapeError, match=r"baddbmm: batch1 and batch2 must have the same batch size, got 2 and 4"):
        ops.baddbmm(t(randf(rng, 5)), t(randf(rng, 2, 3, 4)), t(randf(rng, 4, 4, 5)))
    with pytest.raises(ShapeError, match=r"baddbmm: input of shape \[3, 3, 5\] cannot be broadcast"):
        ops.baddbmm(t(randf(rng, 3, 3, 5)), t(randf(rng, 2, 3, 4)), t(randf(rng, 2, 4, 5)))


# -- einsum ------------------------------------------------------------------------
def test_einsum_subscript_sizes_that_do_not_broadcast(rng):
    message = r"einsum\(\): subscript j has size 5 for operand 1 which does not broadcast with previously seen size 4"
    with pytest.raises(ShapeError, match=message):
        ops.einsum("ij,jk->ik", t(randf(rng, 3, 4)), t(randf(rng, 5, 5)))
    with pytest.raises(ShapeError, match=message):
        ops.einsum.shape_rule("ij,jk->ik", meta(3, 4), meta(5, 5))


def test_einsum_operand_count_and_rank(rng):
    with pytest.raises(ShapeError, match=r"einsum\(\): the equation 'ij,jk->ik' names 2 operand\(s\) but 1 were given"):
        ops.einsum("ij,jk->ik", t(randf(rng, 3, 4)))
    with pytest.raises(ShapeError, match=r"the subscripts 'ijk' of operand 0 name 3 dimension\(s\) but the operand "
                                         r"has 2 \(shape \[3, 4\]\)"):
        ops.einsum("ijk->i", t(randf(rng, 3, 4)))


def test_einsum_bad_equations(rng):
    a = t(randf(rng, 3, 4))
    with pytest.raises(ShapeError, match=r"einsum\(\): invalid equation 'i1->i'"):
        ops.einsum("i1->i", t(randf(rng, 3)))
    with pytest.raises(ShapeError, match=r"output subscript k in 'ij->k' must appear once in the output and at "
                                         r"least once in the inputs"):
        ops.einsum("ij->k", a)
    with pytest.raises(DTypeError, match=r"einsum\(\): the equation must be a string"):
        ops.einsum(3, a)


def test_einsum_dtype_mismatch(rng):
    with pytest.raises(DTypeError, match=r"einsum: expected all inputs to have the same dtype, "
                                         r"got float32 and float64"):
        ops.einsum("ij,jk", t(randf(rng, 3, 4)), t(randf(rng, 4, 5, dtype=np.float64)))
