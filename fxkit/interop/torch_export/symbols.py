"""Dynamic dims: torch.export's size symbols (``s45``) as fxkit `Sym` dims with the user's names.

A ``torch.export.Dim("N")`` in ``dynamic_shapes`` becomes the fxkit dim ``N``;
dims torch made dynamic without a name keep torch's symbol (``s45``);
derived sizes (``2*s45``) become the same arithmetic on `Sym`.
"""
from fxkit.errors import ShapeError
from fxkit.transforms.symbolic import Sym


def dim_names(torch, program, dynamic_shapes):
    """``{torch symbol: name}`` for each dim declared with a named ``torch.export.Dim``."""
    if not dynamic_shapes:
        return {}
    inputs = [n for n in program.graph.nodes if n.op == "placeholder"]
    users = {spec.arg.name for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"}
    inputs = [n for n in inputs if n.name in users]
    names = {}
    specs = (dynamic_shapes.items() if isinstance(dynamic_shapes, dict)
             else zip([n.name for n in inputs], dynamic_shapes))
    by_name = {n.name: n for n in inputs}
    for arg_name, spec in specs:
        node = by_name.get(arg_name)
        val = node.meta.get("val") if node is not None else None
        if val is None or spec is None or not isinstance(val, torch.Tensor):
            continue
        dims = spec.items() if isinstance(spec, dict) else enumerate(spec)
        for axis, dim in dims:
            size = val.shape[axis]
            name = getattr(dim, "__name__", None)
            if name and not isinstance(size, int) and name.isidentifier():
                names[str(size.node.expr)] = name
    return names


def symbolic_dim(expr, names):
    """A torch size expression (``s0``, ``2*s0``) as an fxkit `Sym`, symbols renamed by ``names``."""
    text = str(expr)
    symbols = {str(s): Sym.symbol(names.get(str(s), str(s))) for s in getattr(expr, "free_symbols", ())}
    try:
        return eval(text, {"__builtins__": {}}, symbols)  # noqa: S307  (sympy's own arithmetic text)
    except Exception as exc:  # noqa: BLE001
        raise ShapeError(f"fxkit.from_torch: the symbolic size {text} has no fxkit form") from exc
