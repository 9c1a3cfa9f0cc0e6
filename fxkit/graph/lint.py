"""`lint(graph)`: check a graph is well formed before code is generated from it.

Catches what passes get wrong: a node used before it is defined, a use of an
erased node, names that are duplicated or not identifiers, ``users`` out of
step with ``args``, calls to something that is neither an `Op`, a callable nor
an existing submodule, ``get_attr`` of a missing attribute (both checked when
the graph belongs to a module), and anything but exactly one output.
"""
from fxkit.codegen.namespace import RESERVED, is_plain_identifier
from fxkit.errors import GraphError, format_error
from fxkit.graph.node import OPCODES, map_arg
from fxkit.runtime.op import Op


def lint(graph):
    """Raise `GraphError` naming the first malformed node of ``graph``."""
    seen = set()
    names = {}
    outputs = []
    owner = graph.owning_module
    for node in graph.nodes:
        if node.graph is not graph:
            _fail(node, "belongs to another graph", "copy it in with graph.node_copy(node)")
        if node.op not in OPCODES:
            _fail(node, f"has the unknown opcode {node.op!r}", f"use one of {', '.join(OPCODES)}")
        if node.name in names:
            _fail(node, f"has the same name as an earlier node ({names[node.name].format_node()})",
                  "names are unique; let the graph pick one (name=None)")
        if not is_plain_identifier(node.name) or node.name in RESERVED:
            _fail(node, f"has the name {node.name!r}, which is no valid Python identifier",
                  "rename it with node.name = ... (the graph makes it valid)")
        names[node.name] = node
        # NOTE: walk the arguments themselves, not the cached set of inputs: a container
        # changed behind the node's back (list.append(node.args[0], x)) shows up here.
        read = {}
        map_arg((node.args, node.kwargs), lambda n: read.setdefault(n))
        for used in read:
            if used._erased:
                _fail(node, f"uses %{used.name}, which was erased", "replace the use before erasing the node")
            if used.graph is not graph:
                _fail(node, f"uses %{used.name} of another graph", "copy it in with graph.node_copy")
            if used not in seen:
                _fail(node, f"uses %{used.name} before it is defined",
                      f"insert %{node.name} after %{used.name} (graph.inserting_after)")
            if node not in used.users or used not in node._inputs:
                _fail(node, f"reads %{used.name} but is missing from its users",
                      "edit args through node.args / node.update_arg, which keep users in step")
        for used in node._inputs:
            if used not in read:
                _fail(node, f"lists %{used.name} as an input, but its arguments do not read it",
                      "edit args through node.args / node.update_arg, which keep users in step")
        for user in node.users:
            if user._erased or node not in user._inputs:
                _fail(node, f"lists %{user.name} as a user, but %{user.name} does not read it",
                      "edit args through node.args / node.update_arg, which keep users in step")
        _check_target(node, owner)
        if node.op == "output":
            outputs.append(node)
        seen.add(node)
    if len(outputs) != 1:
        found = ", ".join(n.format_node() for n in outputs) or "none"
        raise GraphError(format_error(f"graph.lint: a graph has exactly one output node, found {len(outputs)}",
                                      node=found, hint="end the graph with one graph.output(value)"))


def _check_target(node, owner):
    op, target = node.op, node.target
    if op == "call":
        if isinstance(target, Op):
            return
        if type(target) is str:
            if owner is not None and not _is_submodule(owner, target):
                _fail(node, f"calls the submodule {target!r}, which the module does not have",
                      "add it with gm.add_submodule(name, module)")
            return
        if not callable(target):
            _fail(node, f"calls {target!r}, which is neither an Op, a callable nor a submodule path",
                  "use an op from fxkit.ops, a function wrapped with fxkit.wrap, or a submodule name")
    elif op == "get_attr":
        if type(target) is not str:
            _fail(node, f"has the get_attr target {target!r}, which is no attribute name",
                  "use a qualified name like 'layer1.0.weight'")
        if owner is not None:
            missing = _missing_part(owner, target)
            if missing is not None:
                _fail(node, f"reads the attribute {target!r}, which the module does not have "
                            f"({missing!r} is missing)",
                      "register it with register_buffer / register_parameter, or fix the name")
    elif op == "placeholder" and type(target) is not str:
        _fail(node, f"has the placeholder target {target!r}, which is no argument name", "use a str")


def _is_submodule(owner, qualname):
    try:
        owner.get_submodule(qualname)
    except AttributeError:
        return False
    return True


def _missing_part(owner, qualname):
    value = owner
    walked = []
    for part in qualname.split("."):
        walked.append(part)
        try:
            value = getattr(value, part)
        except AttributeError:
            return ".".join(walked)
    return None


def _fail(node, problem, hint):
    raise GraphError(format_error(f"graph.lint: %{node.name} {problem}", where=node.stack,
                                  node=node.format_node(), hint=hint))
