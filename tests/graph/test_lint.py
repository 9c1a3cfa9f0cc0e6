"""graph.lint(): each malformed graph raises GraphError naming the node and how to fix it."""
import pytest

from fxkit import GraphError, ops
from fxkit.graph import Graph, GraphModule, SourceLocation
from tests.graph.builders import MyModule, my_module_graph


def _chain():
    g = Graph()
    x = g.placeholder("x")
    a = g.call(ops.relu, (x,))
    b = g.call(ops.neg, (a,))
    g.output(b)
    return g, x, a, b


def test_well_formed_graphs_pass():
    my_module_graph().lint()
    GraphModule(MyModule(), my_module_graph()).graph.lint()


def test_use_before_definition():
    g, x, a, b = _chain()
    b.append(a)  # relu now comes after neg, which reads it
    b.meta["stack"] = SourceLocation("model.py", 7, "forward", "return y.neg()")
    with pytest.raises(GraphError) as info:
        g.lint()
    message = str(info.value)
    assert "graph.lint: %neg uses %relu before it is defined" in message
    assert "at model.py:7 in forward: return y.neg()" in message
    assert "node: %neg = call[neg](%relu)" in message
    assert "hint: insert %neg after %relu" in message


def test_use_of_erased_node():
    g, x, a, b = _chain()
    extra = g.call(ops.exp, (x,))
    g.erase_node(extra)
    b.args = (extra,)
    with pytest.raises(GraphError, match="graph.lint: %neg uses %exp, which was erased"):
        g.lint()


def test_call_target_that_is_nothing_callable():
    g, x, a, b = _chain()
    a.target = 42
    with pytest.raises(GraphError, match="%relu calls 42, which is neither an Op, a callable nor a submodule path"):
        g.lint()


def test_call_of_missing_submodule():
    gm = GraphModule(MyModule(), my_module_graph())
    linear = gm.graph.find_nodes(target="linear")[0]
    linear.target = "linear2"
    with pytest.raises(GraphError) as info:
        gm.graph.lint()
    assert "%linear calls the submodule 'linear2', which the module does not have" in str(info.value)
    assert "hint: add it with gm.add_submodule(name, module)" in str(info.value)


def test_get_attr_of_missing_attribute():
    gm = GraphModule(MyModule(), my_module_graph())
    param = gm.graph.find_nodes(op="get_attr")[0]
    param.target = "linear.scale"
    with pytest.raises(GraphError, match=r"%param reads the attribute 'linear.scale', which the module does not "
                                         r"have \('linear.scale' is missing\)"):
        gm.graph.lint()


def test_duplicate_names():
    g, x, a, b = _chain()
    b._name = "relu"  # bypassing the namespace, as a buggy pass might
    with pytest.raises(GraphError, match=r"%relu has the same name as an earlier node \(%relu = call\[relu\]"):
        g.lint()


def test_invalid_name():
    g, x, a, b = _chain()
    a._name = "not valid"
    with pytest.raises(GraphError, match="has the name 'not valid', which is no valid Python identifier"):
        g.lint()


def test_inconsistent_users():
    g, x, a, b = _chain()
    x.users.pop(a)
    with pytest.raises(GraphError, match="%relu reads %x but is missing from its users"):
        g.lint()
    x.users[a] = None
    x.users[b] = None
    with pytest.raises(GraphError, match="%x lists %neg as a user, but %neg does not read it"):
        g.lint()


@pytest.mark.parametrize("outputs", [0, 2])
def test_exactly_one_output(outputs):
    g = Graph()
    x = g.placeholder("x")
    for _ in range(outputs):
        g.output(x)
    with pytest.raises(GraphError, match=f"a graph has exactly one output node, found {outputs}"):
        g.lint()


def test_node_of_another_graph():
    g, x, a, b = _chain()
    other = Graph()
    stranger = other.placeholder("y")
    b.args = (stranger,)
    with pytest.raises(GraphError, match="%neg uses %y of another graph"):
        g.lint()
