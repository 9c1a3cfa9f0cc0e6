"""Constants that source text cannot spell directly: 400-deep tuples, ints past CPython's
4,300-digit limit, signed zeros in complex numbers. Generated code, printing and save/load keep them."""
import pytest

import fxkit
from fxkit.errors import GraphError
from fxkit.graph import Graph, GraphModule


def _deep(n, leaf=1):
    value = leaf
    for _ in range(n):
        value = (value,)
    return value


def _module(constant):
    graph = Graph()
    x = graph.placeholder("x")
    graph.output((graph.call(fxkit.ops.add, (x, 1)), constant))
    return GraphModule({}, graph)


@pytest.mark.parametrize("constant", [_deep(400), [_deep(100, 2)] * 2, 10 ** 5000, -(7 ** 9000),
                                      complex(0, -0.0), complex(-0.0, 0.0), complex(-0.0, -0.0)],
                         ids=["tuple400", "list_of_deep", "int5000", "negative_int", "complex_0_neg0",
                              "complex_neg0_0", "complex_neg0_neg0"])
def test_generated_code_printing_and_saving_keep_the_constant(constant, tmp_path):
    gm = _module(constant)
    assert "forward" in gm.code
    assert _same(gm(fxkit.ones(2))[1], constant)
    assert "%add" in str(gm.graph)
    fxkit.save(gm, tmp_path / "m")
    assert _same(fxkit.load(tmp_path / "m")(fxkit.ones(2))[1], constant)


def _same(value, expected):
    """Equal, and for complex numbers with the same signs of zero (repr shows them)."""
    return value == expected and (type(expected) is not complex or repr(value) == repr(expected))


def test_big_ints_print_by_size():
    assert "<int of 16610 bits>" in str(_module(10 ** 5000).graph)


def test_a_node_nested_too_deep_for_source_is_a_clear_error():
    graph = Graph()
    x = graph.placeholder("x")
    graph.output(_deep(100, x))
    with pytest.raises(GraphError, match=r"nests %x more than 64 containers deep, which generated code cannot "
                                         r"spell; flatten the argument"):
        GraphModule({}, graph)
