"""PyTorch's parameter names of an op's twin: ``torch.nn.functional`` signatures and ATen schemas."""
import inspect

# Keywords torch's Python bindings add to every factory/like op beyond the ATen schema.
BINDING_KEYWORDS = frozenset({"requires_grad", "device", "dtype", "layout", "pin_memory", "memory_format", "out"})


def torch_parameter_lists(torch, name):
    """``[(positional names, all names)]`` PyTorch has for ``name``: F.<name>, then each Tensor overload
    of aten::<name>. ATen's ``self`` is the Python binding's ``input``; ``out=`` overloads and overloads
    whose first argument is no Tensor (``add.int(int a, int b)``) are left out."""
    import torch.nn.functional as F

    found = []
    fn = getattr(F, name, None)
    params = list(inspect.signature(fn).parameters.values()) if inspect.isfunction(fn) else []
    if params and not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):  # not a dispatcher
        params = [p for p in params if not p.name.startswith("_")]
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        found.append((positional, [p.name for p in params]))
    for schema in torch._C._jit_get_schemas_for_operator(f"aten::{name}"):
        args = schema.arguments
        if any(a.is_out for a in args) or schema.overload_name.endswith("out"):
            continue
        if args and "Tensor" not in str(args[0].type) and args[0].name not in ("size", "start", "end"):
            continue
        names = ["input" if a.name == "self" else a.name for a in args]
        positional = [n for n, a in zip(names, args) if not a.kwarg_only]
        found.append((positional, names))
    return found


def agrees(ours, positional, names):
    """Our names follow PyTorch's positional names in order as far as both go, and every further
    name of ours is one PyTorch takes (by keyword)."""
    k = min(len(ours), len(positional))
    if ours[:k] != positional[:k]:
        return False
    return all(n in names or n in BINDING_KEYWORDS for n in ours[k:])
