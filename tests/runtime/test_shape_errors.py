"""Errors of the shape, rearrange and indexing ops (message checked), their view
semantics (what aliases, what copies), and shape rules over symbolic dims."""
import numpy as np
import pytest

import fxkit
from fxkit.errors import DTypeError, IndexOutOfRangeError, ShapeError
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.registry import get_op


def t(*shape, dtype=np.float32):
    rng = np.random.default_rng(0)
    return fxkit.from_numpy((rng.random(shape) * 4 - 2).astype(dtype))


def ints(*values):
    return fxkit.from_numpy(np.array(values, dtype=np.int64))


# -- views and shapes ------------------------------------------------------------------------------
def test_view_size_mismatch_names_shape_and_size():
    with pytest.raises(ShapeError, match=r"view: shape \[-1, 320\] is invalid for input of size 500"):
        t(5, 100).view(-1, 320)
    with pytest.raises(ShapeError, match=r"view: shape \[3, 5\] is invalid for input of size 12 "
                                         r"\(input shape \[3, 4\]\)"):
        t(3, 4).view(3, 5)


def test_view_of_noncontiguous_layout_points_to_reshape():
    with pytest.raises(ShapeError, match=r"view: view size \[12\] is not compatible .* size \[4, 3\] and stride"
                                         r".*use \.reshape\(\.\.\.\) instead"):
        t(3, 4).t().view(12)
    assert t(3, 4).t().reshape(12).shape == (12,)


def test_view_rejects_two_inferred_and_negative_sizes():
    with pytest.raises(ShapeError, match=r"only one dimension can be inferred \(-1\), got \[-1, -1\]"):
        t(3, 4).view(-1, -1)
    with pytest.raises(ShapeError, match=r"reshape: invalid shape dimension -2 at index 1 of shape \[6, -2\]"):
        t(3, 4).reshape(6, -2)
    with pytest.raises(DTypeError, match=r"view: sizes must be ints, got 2.0"):
        t(3, 4).view(2.0, 6)


def test_permute_wrong_length_and_duplicates():
    with pytest.raises(ShapeError, match=r"permute: the number of dims 3 in \[1, 0, 2\] does not match the input's 2"):
        t(3, 4).permute(1, 0, 2)
    with pytest.raises(ShapeError, match=r"permute: duplicate dims are not allowed, got \[1, -1\]"):
        t(3, 4).permute(1, -1)


def test_dim_out_of_range_names_range():
    with pytest.raises(IndexOutOfRangeError, match=r"transpose: dimension out of range \(expected to be in range "
                                                   r"of \[-2, 1\], but got 2\)"):
        t(3, 4).transpose(0, 2)
    with pytest.raises(IndexOutOfRangeError, match=r"unsqueeze: .*\[-3, 2\], but got 3"):
        t(3, 4).unsqueeze(3)
    with pytest.raises(IndexOutOfRangeError, match=r"size: dimension specified as 0 but the tensor has no dim"):
        fxkit.from_numpy(np.array(1.5, np.float32)).size(0)


def test_t_flatten_unflatten_errors():
    with pytest.raises(ShapeError, match=r"t: expects a tensor with <= 2 dimensions, but got 3D"):
        t(2, 3, 4).t()
    with pytest.raises(ShapeError, match=r"flatten: start_dim \(2\) cannot come after end_dim \(1\)"):
        t(2, 3, 4).flatten(2, 1)
    with pytest.raises(ShapeError, match=r"unflatten: provided sizes \[5, -1\] don't multiply up to the size of "
                                         r"dim 1 \(12\)"):
        t(2, 12).unflatten(1, (5, -1))
    with pytest.raises(ShapeError, match=r"unflatten: sizes must be non-empty"):
        t(2, 12).unflatten(1, ())


def test_expand_errors():
    with pytest.raises(ShapeError, match=r"expand: the expanded size of the tensor \(5\) must match the existing "
                                         r"size \(4\) at non-singleton dimension 1; target sizes \[3, 5\], tensor "
                                         r"sizes \[3, 4\].*\.repeat"):
        t(3, 4).expand(3, 5)
    with pytest.raises(ShapeError, match=r"expand: the number of sizes provided \(1\) must be greater or equal"):
        t(3, 4).expand(4)
    with pytest.raises(ShapeError, match=r"expand: the expanded size -1 isn't allowed in a leading, non-existing "
                                         r"dimension 0"):
        t(3, 4).expand(-1, 3, 4)


def test_narrow_split_chunk_errors():
    with pytest.raises(IndexOutOfRangeError, match=r"narrow: start out of range \(expected to be in range of "
                                                   r"\[-4, 4\], but got 5\)"):
        t(3, 4).narrow(1, 5, 0)
    with pytest.raises(ShapeError, match=r"narrow: start \(3\) \+ length \(2\) exceeds dimension size \(4\)"):
        t(3, 4).narrow(1, 3, 2)
    with pytest.raises(ShapeError, match=r"split: split sizes \[1, 1\] must sum exactly to 3 \(the size of "
                                         r"dimension 0"):
        t(3, 4).split([1, 1])
    with pytest.raises(ShapeError, match=r"split: split_size can only be 0 if dimension size is 0, but got "
                                         r"dimension size of 3"):
        t(3, 4).split(0)
    with pytest.raises(ShapeError, match=r"chunk: expects `chunks` to be an int greater than 0, got: 0"):
        t(3, 4).chunk(0)


# -- cat, stack and the copying rearrangements -------------------------------------------------------
def test_cat_mismatch_names_tensor_index_and_shapes():
    with pytest.raises(ShapeError, match=r"cat: sizes of tensors must match except in dimension 0: tensor 0 has "
                                         r"shape \[3, 4\] but tensor 2 has shape \[3, 5\] \(dimension 1: 4 vs 5\)"):
        fxkit.cat([t(3, 4), t(2, 4), t(3, 5)])
    with pytest.raises(ShapeError, match=r"cat: tensors must have the same number of dimensions: tensor 0 has "
                                         r"shape \[3, 4\] but tensor 1 has shape \[3, 4, 1\]"):
        fxkit.cat([t(3, 4), t(3, 4, 1)])
    with pytest.raises(ShapeError, match=r"cat: zero-dimensional tensor \(at position 1\) cannot be concatenated"):
        fxkit.cat([t(3), fxkit.from_numpy(np.array(1.0, np.float32))])
    with pytest.raises(ShapeError, match=r"cat: expected a non-empty list of tensors"):
        fxkit.cat([])
    with pytest.raises(DTypeError, match=r"cat: expected a sequence of tensors, found int in it"):
        fxkit.cat([t(3), 3])


def test_cat_and_stack_rules_raise_the_same_errors():
    metas = [TensorMeta((3, 4), fxkit.float32), TensorMeta((3, 5), fxkit.float32)]
    with pytest.raises(ShapeError, match=r"tensor 1 has shape \[3, 5\]"):
        get_op("cat").shape_rule(metas)
    with pytest.raises(ShapeError, match=r"stack: expects each tensor to be equal size, but got \[3, 4\] at entry 0 "
                                         r"and \[3, 5\] at entry 1"):
        get_op("stack").shape_rule(metas)


def test_repeat_roll_pad_errors():
    with pytest.raises(ShapeError, match=r"repeat: the number of repeat dims \(1\) can not be smaller than the "
                                         r"number of dimensions of the tensor \(2\)"):
        t(3, 4).repeat(2)
    with pytest.raises(ShapeError, match=r"roll: shifts and dimensions must align: shifts \[1, 2\], dims \[0\]"):
        t(3, 4).roll((1, 2), (0,))
    pad = get_op("pad")
    with pytest.raises(ShapeError, match=r"pad: padding length must be divisible by 2, got 3 values \[1, 2, 3\]"):
        pad(t(2, 3), (1, 2, 3))
    with pytest.raises(ShapeError, match=r"pad: padding length should be less than or equal to two times the input "
                                         r"dimension but got padding length 6 and input of dimension 2"):
        pad(t(2, 3), (1, 1, 1, 1, 1, 1))
    with pytest.raises(ShapeError, match=r"pad: padding size should be less than the corresponding input dimension "
                                         r"in reflect mode, but got padding \(3, 1\) at dimension 1 of input \[2, 3\]"):
        pad(t(2, 3), (3, 1), mode="reflect")
    with pytest.raises(ShapeError, match=r"pad: padding value causes wrapping around more than once"):
        pad(t(2, 3), (4, 0), mode="circular")
    with pytest.raises(ShapeError, match=r"pad: unrecognised padding mode 'mirror'; expected one of constant, "
                                         r"reflect, replicate, circular"):
        pad(t(2, 3), (1, 1), mode="mirror")
    with pytest.raises(ShapeError, match=r"pad: padding mode 'reflect' doesn't take a value argument"):
        pad(t(2, 3), (1, 1), mode="reflect", value=0.0)
    with pytest.raises(ShapeError, match=r"pad: the output size would be negative \(-1\)"):
        pad(t(2, 3), (-2, -2))


# -- indexing ----------------------------------------------------------------------------------------
def test_negative_step_is_refused_like_torch():
    with pytest.raises(ValueError, match=r"getitem: step must be greater than zero, got slice None:None:-1.*\.flip"):
        t(3, 4)[::-1]
    with pytest.raises(ValueError, match=r"setitem: step must be greater than zero"):
        t(3, 4)[:, 3:0:-1] = 1.0


def test_index_out_of_range_names_index_dim_and_size():
    with pytest.raises(IndexOutOfRangeError, match=r"getitem: index 5 is out of bounds for dimension 0 with size 3 "
                                                   r"\(tensor of shape \[3, 4\]"):
        t(3, 4)[5]
    with pytest.raises(IndexOutOfRangeError, match=r"index 7 is out of bounds for dimension 1 with size 4"):
        t(3, 4)[:, 7]
    with pytest.raises(IndexOutOfRangeError, match=r"index 5 is out of bounds for dimension 1 with size 4"):
        t(3, 4)[:, ints(0, 5)]
    with pytest.raises(IndexOutOfRangeError, match=r"too many indices"):
        t(3, 4)[0, 1, 2]
    with pytest.raises(IndexOutOfRangeError, match=r"setitem: index 3 is out of bounds for dimension 0 with size 3"):
        t(3, 4)[3] = 0.0


def test_getitem_rule_errors():
    rule = get_op("getitem").shape_rule
    a = TensorMeta((3, 4), fxkit.float32)
    with pytest.raises(ShapeError, match=r"getitem: the result shape of a boolean mask depends on its values"):
        rule(a, TensorMeta((3, 4), fxkit.bool_))
    with pytest.raises(IndexOutOfRangeError, match=r"getitem: index -4 is out of bounds for dimension 0 with size 3"):
        rule(a, (-4, 0))
    with pytest.raises(IndexOutOfRangeError, match=r"getitem: too many indices for tensor of dimension 2"):
        rule(a, (0, 0, 0))


def test_setitem_shape_mismatch_and_expanded_target():
    with pytest.raises(ShapeError, match=r"setitem: shape mismatch: value of shape \[2\] cannot be broadcast to the "
                                         r"indexing result of tensor of shape \[3, 4\]"):
        t(3, 4)[0] = t(2)
    with pytest.raises(ShapeError, match=r"setitem: the tensor is a read-only broadcast view \(from expand\).*"
                                         r"\.clone\(\)"):
        t(3, 1).expand(3, 4)[0, 0] = 1.0


def test_gather_scatter_index_select_errors():
    x = t(3, 4)
    with pytest.raises(IndexOutOfRangeError, match=r"gather: index 7 is out of bounds for dimension 1 with size 4"):
        x.gather(1, fxkit.from_numpy(np.array([[0, 7]] * 3)))
    with pytest.raises(IndexOutOfRangeError, match=r"gather: index -1 is out of bounds for dimension 1 with size 4"):
        x.gather(1, fxkit.from_numpy(np.array([[0, -1]] * 3)))
    with pytest.raises(ShapeError, match=r"gather: index tensor must have the same number of dimensions as the input "
                                         r"tensor; input shape \[3, 4\], index shape \[2\]"):
        x.gather(1, ints(0, 1))
    with pytest.raises(ShapeError, match=r"gather: size does not match at dimension 0: expected index \[4, 2\] to be "
                                         r"no larger than the input \[3, 4\] apart from dimension 1"):
        x.gather(1, fxkit.from_numpy(np.zeros((4, 2), np.int64)))
    with pytest.raises(DTypeError, match=r"gather: expected an integer \(int64\) index tensor, got float32"):
        x.gather(1, t(3, 2))
    with pytest.raises(DTypeError, match=r"scatter: expected self.dtype to be equal to src.dtype, got float32 and "
                                         r"float64"):
        x.scatter(1, fxkit.from_numpy(np.zeros((1, 2), np.int64)), t(1, 2, dtype=np.float64))
    with pytest.raises(ShapeError, match=r"scatter: give either src \(a tensor\) or value \(a number\), not both"):
        x.scatter(1, fxkit.from_numpy(np.zeros((1, 2), np.int64)), t(1, 2), value=1.0)
    with pytest.raises(IndexOutOfRangeError, match=r"index_select: index is supposed to be a vector"):
        x.index_select(1, fxkit.from_numpy(np.zeros((1, 2), np.int64)))
    with pytest.raises(IndexOutOfRangeError, match=r"index_select: index 4 is out of bounds for dimension 1 with "
                                                   r"size 4"):
        x.index_select(1, ints(0, 4))


def test_masked_fill_and_triangle_errors():
    with pytest.raises(DTypeError, match=r"masked_fill: only supports boolean masks, but got mask with dtype int64"):
        t(3, 4).masked_fill(ints(1, 0, 1, 0), 1.0)
    with pytest.raises(ShapeError, match=r"masked_fill: only supports a 0-dimensional value tensor, but got a tensor "
                                         r"of shape \[2\]"):
        t(3, 4).masked_fill(t(4) > 0, t(2))
    with pytest.raises(ShapeError, match=r"tril: input tensor must have at least 2 dimensions, got shape \[3\]"):
        t(3).tril()


# -- view semantics ------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda x: x.view(4, 3), lambda x: x.reshape(12), lambda x: x.permute(1, 0), lambda x: x.t(),
    lambda x: x.unsqueeze(0), lambda x: x.narrow(1, 1, 2), lambda x: x.split(2, 1)[1], lambda x: x.chunk(2)[0],
    lambda x: x[1:, ::2], lambda x: x[1, 2], lambda x: x.expand(2, 3, 4), lambda x: x.flatten(),
], ids=["view", "reshape", "permute", "t", "unsqueeze", "narrow", "split", "chunk", "getitem", "getitem_scalar",
        "expand", "flatten"])
def test_views_share_storage(make):
    x = t(3, 4)
    assert np.shares_memory(make(x).numpy(), x.numpy())


def test_copies_and_layouts_follow_torch():
    x = t(3, 4)
    assert x.contiguous()._data is x._data
    assert x.t().contiguous().numpy().flags.c_contiguous
    assert not np.shares_memory(x.t().reshape(12).numpy(), x.numpy())
    flipped = x.flip(0)
    assert flipped.numpy().flags.c_contiguous and not np.shares_memory(flipped.numpy(), x.numpy())
    assert flipped.view(12).shape == (12,)


def test_setitem_writes_through_views_and_scalar_views():
    x = t(3, 4)
    before = x.numpy().copy()
    x.t()[1] = 9.0
    element = x[2, 3]
    element.add_(1.0)
    before[:, 1] = 9.0
    before[2, 3] += 1.0
    np.testing.assert_array_equal(x.numpy(), before)


def test_size_queries_return_python_ints():
    x = t(2, 3)
    assert x.size() == (2, 3) and type(x.size(1)) is int
    assert type(x.numel()) is int and x.numel() == 6 and x.dim() == 2


# -- shape rules over symbolic dims ---------------------------------------------------------------------
class Sym:
    """A minimal symbolic dimension: arithmetic builds an expression string."""

    def __init__(self, text):
        self.text = text

    def _op(self, other, sym, flip=False):
        a, b = (str(other), self.text) if flip else (self.text, str(other))
        return Sym(f"({a} {sym} {b})")

    def __add__(self, o): return self._op(o, "+")
    def __radd__(self, o): return self._op(o, "+", True)
    def __sub__(self, o): return self._op(o, "-")
    def __rsub__(self, o): return self._op(o, "-", True)
    def __mul__(self, o): return self._op(o, "*")
    def __rmul__(self, o): return self._op(o, "*", True)
    def __floordiv__(self, o): return self._op(o, "//")
    def __str__(self): return self.text


def _shape(op_name, *args, **kwargs):
    return tuple(str(d) for d in get_op(op_name).shape_rule(*args, **kwargs).shape)


def test_rules_pass_symbolic_dims_through():
    n = Sym("N")
    a = TensorMeta((n, 3, 4), fxkit.float32)
    assert _shape("view", a, n, -1) == ("N", "((((1 * N) * 3) * 4) // (1 * N))")
    assert _shape("flatten", a, 1) == ("N", "12")
    assert _shape("permute", a, 2, 0, 1) == ("4", "N", "3")
    assert _shape("unsqueeze", a, 1) == ("N", "1", "3", "4")
    assert _shape("expand", TensorMeta((1, 4), fxkit.float32), n, -1) == ("N", "4")
    assert _shape("cat", [a, a]) == ("(N + N)", "3", "4")
    assert _shape("getitem", a, (slice(None), 0)) == ("N", "4")
    assert _shape("getitem", a, slice(1, None)) == ("(N - 1)", "3", "4")
    assert _shape("pad", a, (1, 1, 0, 0, 2, 0)) == ("((N + 2) + 0)", "3", "6")
    assert get_op("size").shape_rule(a, 0) is n
