"""`bound_metas`: a node's arguments as the numba backend's lowering rules read them."""


def bound_metas(node):
    """``node``'s arguments bound to its op's signature by parameter name, each node argument replaced by
    its ``tensor_meta`` (constants as they are).

    Raises:
        TypeError: the arguments do not bind to the signature.
    """
    def meta(a):
        return a.meta.get("tensor_meta") if hasattr(a, "meta") else a

    return node.target.signature.bind(*map(meta, node.args), **{k: meta(v) for k, v in node.kwargs.items()}).arguments
