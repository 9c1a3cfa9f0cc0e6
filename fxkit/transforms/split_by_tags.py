"""`split_by_tags`: one child module per tag (torch.fx's ``passes.split_utils.split_by_tags``).

Every ``call`` node carries a tag (``node.tag``, stored as ``meta["tag"]``);
the nodes of one tag become the child module named after the tag, and the
parent calls the children in data-flow order. It is `split_module` keyed by
tag, with the children named by their tags instead of ``submod_<i>``.

Example::

    before (linear tagged "front", relu and linear_1 "back"):
        %x        = placeholder[x]
        %linear   = call[self.a](%x)
        %relu     = call[relu](%linear)
        %linear_1 = call[self.b](%relu)
        return %linear_1

    after, the parent:
        %x     = placeholder[x]
        %front = call[self.front](%x)
        %back  = call[self.back](%front)
        return %back
"""
from fxkit.codegen.namespace import is_plain_identifier
from fxkit.errors import GraphError
from fxkit.transforms.split_module import split_module


def split_by_tags(gm, tags, return_fqn_mapping=False):
    """Split ``gm`` into one child `GraphModule` per tag, each an attribute named after its tag.

    Args:
        gm: the module to split (left unchanged); every ``call`` node has a tag from ``tags``.
        tags: the tags (valid identifiers), e.g. ``["front", "back"]``.
        return_fqn_mapping: also return ``{qualified name in gm: qualified name in the
            parent}`` of every submodule and attribute the children read
            (``{"linear1": "red.linear1"}``), as torch.fx's does.

    Returns:
        The parent `GraphModule`; ``parent.<tag>`` is the child of that tag (tags
        without nodes get none). With ``return_fqn_mapping``, ``(parent, mapping)``.

    Raises:
        GraphError: a ``call`` node has no tag or one not in ``tags``, a tag is no
            identifier, or the tags' nodes read each other both ways.
    """
    tags = list(tags)
    for tag in tags:
        if type(tag) is not str or not is_plain_identifier(tag):
            raise GraphError(f"split_by_tags: the tag {tag!r} is no valid identifier; a tag names the child module")
    index = {tag: i for i, tag in enumerate(tags)}

    def partition(node):
        tag = node.tag
        if tag not in index:
            raise GraphError(f"split_by_tags: {node.format_node()} has the tag {tag!r}, which is not one of "
                             f"{tags}; tag every call node (node.tag = ...) with one of them")
        return index[tag]

    parent = split_module(gm, partition, prefix="__split_by_tags_")
    graph = parent.graph
    mapping = {}
    for node in list(graph.find_nodes(op="call")):
        key = node.meta.get("partition")
        if type(node.target) is not str or key is None:
            continue
        tag = tags[key]
        child = parent.get_submodule(node.target)
        parent.delete_submodule(node.target)
        parent.add_submodule(tag, child)
        type(child).__name__ = type(child).__qualname__ = f"{type(gm).__name__}_{tag}"
        node.target = tag
        node.name = tag
        node.tag = tag
        for inner in child.graph.nodes:
            if inner.op in ("call", "get_attr") and type(inner.target) is str:
                mapping.setdefault(inner.target, f"{tag}.{inner.target}")
    parent.recompile()
    return (parent, mapping) if return_fqn_mapping else parent
