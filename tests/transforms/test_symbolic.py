"""Sym: arithmetic, simplification, printing, decidable comparisons and their errors."""
import pickle

import pytest

from fxkit.errors import ShapeError
from fxkit.transforms.symbolic import Sym, dim_of

N = Sym.symbol("N")
H = Sym.symbol("H")


@pytest.mark.parametrize("expr, text", [
    (N, "N"),
    (N * 196, "N*196"),
    (N + N, "2*N"),
    (2 * N, "2*N"),
    (N * 14 * 14, "N*196"),
    (N + 1, "N + 1"),
    (1 - N, "-N + 1"),
    (N * H, "N*H"),
    ((N + 1) * (N - 1), "N*N - 1"),
    ((N + 2 - 3) // 2 + 1, "(N + 1)//2"),       # conv 3x3, stride 2, padding 1
    (((H + 1) // 2 + 2 - 3) // 2 + 1, "(H + 3)//4"),
    (N // 2 // 2, "N//4"),
    (N % 3, "N % 3"),
    ((N + 1) // 2 * 4, "((N + 1)//2)*4"),
    (-((N + 1) // 2), "-((N + 1)//2)"),
])
def test_prints_readably(expr, text):
    assert str(expr) == text
    assert repr(expr) == f"Sym({text})"


def test_simplifies_to_ints_and_exact_quotients():
    assert N - N == 0 and type(N - N) is int
    assert (N * 2048) // N == 2048
    assert (N * 3 * 224 * 224) // (3 * 224 * 224) == N
    assert (2 * N + 1) // 2 == N
    assert (2 * N - 1) // 2 + 1 == N
    assert (2 * N + 1) % 2 == 1
    assert (N * 6) % 3 == 0
    assert (N * H * 4) // (N * 2) == H * 2


def test_substitution_matches_python_integer_arithmetic():
    expr = ((H + 2 * 3 - 7) // 2 + 1) * N * 64 + N % 3
    for n in (1, 2, 7):
        for h in (1, 31, 224, 225):
            assert expr.subs(N=n, H=h) == ((h + 6 - 7) // 2 + 1) * n * 64 + n % 3
    assert expr.subs(H=224) == N * 7168 + N % 3


def test_symbols_are_positive_so_some_comparisons_decide():
    assert N >= 1 and N > 0 and not (N < 1) and not (N <= 0)
    assert N + 1 != N and not (N + 1 == N)
    assert 2 * N > N and N < N + 1
    assert N != -1 and N != 0
    assert bool(N)
    assert max(N, 1) is N
    assert N == N and N * 2 == 2 * N


def test_undecidable_comparison_names_the_dimension():
    with pytest.raises(ShapeError, match=r"cannot decide N == 4 for the symbolic dimension\(s\) N: .*give this "
                                         r"dimension as an int"):
        N == 4  # noqa: B015
    with pytest.raises(ShapeError, match="cannot decide H < N"):
        H < N  # noqa: B015


def test_concrete_value_is_refused_with_a_clear_error():
    with pytest.raises(ShapeError, match="the symbolic dimension N has no concrete value: this shape rule needs "
                                         "an int here; give the dimension\\(s\\) N as ints"):
        int(N)
    with pytest.raises(ShapeError, match="no concrete value"):
        range(N)
    with pytest.raises(ShapeError, match="true division of the symbolic dimension N by 2: .*use //"):
        N / 2  # noqa: B018


def test_hash_follows_equality_and_pickles():
    assert hash(N * 2) == hash(2 * N)
    assert {N * 2: "x"}[N + N] == "x"
    restored = pickle.loads(pickle.dumps((N + 1) // 2))
    assert str(restored) == "(N + 1)//2" and restored == (N + 1) // 2


def test_free_symbols():
    assert ((N + H) // 2).free_symbols == {"N", "H"}


def test_dim_of_spec_items():
    assert dim_of(3) == 3 and str(dim_of("batch")) == "batch"
    with pytest.raises(ShapeError, match="a dimension is a non-negative int or a name like 'N', got -1"):
        dim_of(-1)
    with pytest.raises(ShapeError, match="symbolic dimension names are identifiers like 'N' or 'batch', got '2x'"):
        dim_of("2x")


def test_shape_rules_match_symbolic_dims_that_print_differently():
    """``N*4`` (a reshape of N x 4 heads) and ``4*N`` (an expand's size) are one size to every shape rule."""
    from fxkit import ops
    from fxkit.runtime import dtypes
    from fxkit.runtime.meta import TensorMeta, same_dim

    assert str(N * 4) != str(4 * N) and same_dim(N * 4, 4 * N)
    assert not same_dim(N, H) and not same_dim(N, 4)
    a, b = TensorMeta((N * 4, 16, 8), dtypes.float32), TensorMeta((4 * N, 8, 16), dtypes.float32)
    assert ops.bmm.shape_rule(a, b).shape == (N * 4, 16, 16)
    assert ops.matmul.shape_rule(a, b).shape == (N * 4, 16, 16)
    assert ops.add.shape_rule(a, TensorMeta((4 * N, 16, 8), dtypes.float32)).shape == (N * 4, 16, 8)
    assert ops.einsum.shape_rule("bij,bjk->bik", a, b).shape == (N * 4, 16, 16)
