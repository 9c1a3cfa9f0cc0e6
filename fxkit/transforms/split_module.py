"""`split_module`: cut a `GraphModule` into one child module per partition.

The result is a parent `GraphModule` whose graph calls the children in
order; every value that crosses partitions becomes an explicit output of the
child computing it and an explicit input of each child reading it. Each child
owns exactly the parameters it uses: a ``get_attr`` lives in the first
partition reading it and is handed to later readers as an ordinary value, so
no parameter is duplicated and none is lost (a submodule with parameters
called from two partitions cannot be split without copying its weights, and
is refused).

Example::

    before (partition_fn: linear -> 0, relu and linear_1 -> 1):
        %x        = placeholder[x]
        %linear   = call[self.a](%x)
        %relu     = call[relu](%linear)
        %linear_1 = call[self.b](%relu)
        return (%linear_1, %linear)

    after, the parent:                          submod_1:
        %x        = placeholder[x]                  %linear   = placeholder[linear]
        %submod_0 = call[self.submod_0](%x)         %relu     = call[relu](%linear)
        %submod_1 = call[self.submod_1](%submod_0)  %linear_1 = call[self.b](%relu)
        return (%submod_1, %submod_0)               return %linear_1
"""
from fxkit.errors import GraphError
from fxkit.graph import Graph, GraphModule, fetch_attr, map_arg
from fxkit.runtime.nn import Module
from fxkit.transforms.split_plan import SplitPlan, build_child, call_child


def split_module(gm, *args, **kwargs):
    """Split ``gm`` into one child `GraphModule` per partition, called in order by a parent.

    Two calling conventions: fxkit's ``split_module(gm, partition_fn, prefix="submod_")``, and
    torch.fx's ``split_module(m, root_m, split_callback, qualname_map=None, ...)`` (recognised
    by a module or None in second place, or by ``root_m=``/``split_callback=``), which
    `split_module_torch` documents.

    Args:
        gm: the module to split (left unchanged).
        partition_fn: ``node -> key`` for every ``call`` node; nodes with equal
            keys form one partition. Keys need no order: partitions run in an
            order that respects the data flow (ties by first appearance).
            ``get_attr`` nodes follow their first reader, placeholders and the
            output stay in the parent.
        prefix: children are named ``<prefix>0``, ``<prefix>1``, ... in call order.

    Returns:
        The parent `GraphModule`; its ``call`` node of each child has the
        partition key in ``meta["partition"]``.

    Raises:
        GraphError: partitions depend on each other both ways (no order can run
            them), ``partition_fn`` gave None, or a parameter would have to live
            in two children.

    Example:
        >>> parent = split_module(gm, lambda node: 0 if node.name < "m" else 1)
        >>> parent(x)   # equals gm(x)
    """
    if "root_m" in kwargs or "split_callback" in kwargs or (args and (args[0] is None or isinstance(args[0], Module))):
        return split_module_torch(gm, *args, **kwargs)
    return _split_owned(gm, *args, **kwargs)


def split_module_torch(m, root_m, split_callback, qualname_map=None, keep_original_order=False,
                       keep_original_node_name=False, keep_original_input_name=True, tuple_return=False):
    """torch.fx's ``split_module`` calling convention and semantics.

    Where it differs from fxkit's form: children are named ``submod_<key>`` after
    the callback's key; every ``get_attr`` stays in the parent and is passed to
    the children reading it; a submodule called from several partitions is
    shared by them (the same object, under the flat name ``a_b`` for ``a.b``);
    a child's inputs come in the order its nodes first read them.

    Args:
        m: the module to split (left unchanged).
        root_m: accepted for torch.fx's signature (an `nn.Module` or None); torch.fx
            does not use it either: targets are looked up in ``m``.
        split_callback: ``node -> key`` for every ``call`` node.
        qualname_map: a dict filled with ``{"submod_<key>.<name in child>": qualified name in m}``
            for every submodule a child calls.
        keep_original_order, keep_original_node_name: accepted for torch.fx's
            signature; fxkit always keeps node names, and runs the partitions in
            order of first appearance whenever that order respects the data flow.
        keep_original_input_name: False names each child's inputs ``arg_0``, ``arg_1``, ...
        tuple_return: every child returns a tuple, even of one value.

    Example:
        >>> qualname_map = {}
        >>> parent = split_module(traced, model, lambda node: 0 if node.name < "m" else 1, qualname_map)
    """
    if root_m is not None and not isinstance(root_m, Module):
        raise GraphError(f"split_module: root_m must be an fxkit.nn.Module or None, got {type(root_m).__name__}; "
                         f"fxkit's own form is split_module(gm, partition_fn)")
    for flag, value in (("keep_original_order", keep_original_order),
                        ("keep_original_node_name", keep_original_node_name),
                        ("keep_original_input_name", keep_original_input_name), ("tuple_return", tuple_return)):
        if type(value) is not bool:
            raise GraphError(f"split_module: {flag} must be True or False, got {value!r}")
    plan = SplitPlan(m, split_callback, attrs_in_parent=True, inputs_in_use_order=True)

    def child(key, inputs, outputs):
        name = f"submod_{key}"
        shared = {}
        # A submodule read as a value (get_attr) is read inside the child, as torch.fx's newer versions do.
        modules = [u for u in inputs if u.op == "get_attr" and isinstance(fetch_attr(m, u.target), Module)]
        inputs = [u for u in inputs if u not in modules]
        names = None if keep_original_input_name else [f"arg_{i}" for i in range(len(inputs))]
        built = build_child(m, plan.members[key], inputs, outputs, f"{type(m).__name__}_{name}", names, shared,
                            tuple_return, modules)
        if qualname_map is not None:
            qualname_map.update({f"{name}.{local}": qualname for local, qualname in shared.items()})
        return name, built, inputs

    return _assemble(m, plan, child, tuple_return)


def _split_owned(gm, partition_fn, prefix="submod_"):
    """fxkit's form of `split_module`: each child owns the parameters it reads."""
    plan = SplitPlan(gm, partition_fn)
    names = {key: f"{prefix}{index}" for index, key in enumerate(plan.order)}

    def child(key, inputs, outputs):
        name = names[key]
        return name, build_child(gm, plan.members[key], inputs, outputs, f"{type(gm).__name__}_{name}"), inputs

    parent = _assemble(gm, plan, child)
    _check_parameters_once({name: parent.get_submodule(name) for name in names.values()})
    return parent


def _assemble(gm, plan, make_child, tuple_return=False):
    """The parent: ``gm``'s placeholders, then a call of each child in order.

    ``make_child(key, inputs, outputs)`` gives ``(name, child, the inputs it is called with)``;
    an unowned ``get_attr`` is copied into the parent where a child call or the output first reads it.
    """
    parent_graph = Graph()
    value = {}  # original node -> the parent node holding its value
    root = {}

    def read(node):
        if node not in value:  # an unowned get_attr
            value[node] = parent_graph.node_copy(node)
            root[node.target] = fetch_attr(gm, node.target)
        return value[node]

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value[node] = parent_graph.node_copy(node)
    for key in plan.order:
        name, root[name], inputs = make_child(key, plan.inputs[key], plan.outputs[key])
        outputs = plan.outputs[key]
        call = call_child(parent_graph, name, tuple(read(v) for v in inputs), outputs, value, tuple_return)
        call.meta["partition"] = key
    output = gm.graph.output_node()
    parent_graph.output(map_arg(output.args[0], read) if output.args else None)
    parent = GraphModule(root, parent_graph, f"{type(gm).__name__}Split")
    parent.training = gm.training
    return parent


def _check_parameters_once(children):
    owner = {}
    for name, child in children.items():
        tensors = list(child.named_parameters()) + list(child.named_buffers())
        for qualname, tensor in tensors:
            first = owner.setdefault(id(tensor), (name, qualname))
            if first[0] != name:
                raise GraphError(
                    f"split_module: {qualname!r} would be owned by both {first[0]} and {name}: a submodule with "
                    f"parameters or buffers is called from two partitions; put all calls of that module in one "
                    f"partition (or read its weights with get_attr, which is passed between partitions)")
