"""The cost model: FLOPs, bytes moved and parameters per node, from inferred shapes.

Nothing runs: shapes come from `infer_shapes` (so a symbolic batch ``N``
gives costs like ``N*8178728960``), and FLOPs from `FLOP_RULES`, a table
keyed by `Op` (falling back to `KIND_FLOPS`, keyed by ``Op.kind``):

* matmul family: ``2*M*N*K`` (``linear``, ``matmul``, ``bmm``, ``addmm``, ``einsum``: output
  elements times the contracted size, times 2);
* convolution: ``2*N*OC*OH*OW*(IC/groups)*KH*KW``; pooling: output elements times the window;
* elementwise ops and reductions: one FLOP per element (of the output and
  of the input respectively); normalisations a few per element;
* views, size queries and data movement (cat, pad, casts, ...): no FLOPs;
* a leaf module or wrapped function: the sum over its traced body (see
  `infer_shapes`), so ``Conv2d`` costs what its ``conv2d`` costs.

Bytes read are the input tensors' bytes (parameters included), bytes
written the outputs'; views move nothing. MACs are FLOPs / 2; ResNet-50 at
224x224 comes to 4.1 GMACs, the published figure.

Example:
    >>> total = estimate_cost(gm, ("N", 3, 224, 224))
    >>> str(total.macs)
    'N*4108815616'
    >>> summary(gm, (1, 3, 224, 224))     # rich table, one row per node, totals last
"""
import dataclasses
import math

from fxkit.errors import ShapeError
from fxkit.graph import map_arg
from fxkit.graph.node import format_target
from fxkit.graph.printer import format_type
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.nn.module import Module
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.op import Op
from fxkit.runtime.registry import get_op
from fxkit.transforms.infer_shapes import ShapeInference, spec_meta, trace_body
from fxkit.transforms.symbolic import Sym


@dataclasses.dataclass(frozen=True)
class Cost:
    """What one node (or a whole graph) costs; fields are ints or `Sym` expressions.

    Attributes:
        flops: floating point operations (a multiply-add is 2).
        bytes_read: bytes of the input tensors.
        bytes_written: bytes of the output tensors.
        params: parameter elements the node reads.
        param_bytes: bytes of those parameters.
    """

    flops: object = 0
    bytes_read: object = 0
    bytes_written: object = 0
    params: object = 0
    param_bytes: object = 0

    @property
    def macs(self):
        """Multiply-accumulates: FLOPs / 2."""
        return self.flops // 2

    def __add__(self, other):
        return Cost(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))


ZERO = Cost()


def numel(meta):
    """Elements of a `TensorMeta` (an int or a `Sym`)."""
    return math.prod(meta.shape)


def nbytes(value):
    """Bytes of every `TensorMeta` in a nested structure."""
    total = 0
    for meta in _tensor_metas(value):
        total = total + numel(meta) * meta.dtype.itemsize
    return total


def _tensor_metas(value):
    if isinstance(value, TensorMeta):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensor_metas(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensor_metas(v)


def _first(value):
    return next(_tensor_metas(value))


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


# -- FLOP rules: rule(out, *args, **kwargs) over metas, in the op's argument positions ----------
def _contracting(k):
    """2 * output elements * the contracted size of argument ``k``'s last dimension."""
    return lambda out, *args, **kwargs: 2 * numel(_first(out)) * args[k].shape[-1]


def _conv(out, input, weight, *args, **kwargs):
    return 2 * numel(out) * math.prod(weight.shape[1:])


def _conv_weight_grad(out, input, weight_size, grad_output, *args, **kwargs):
    # the forward convolution's multiply-adds, with the output gradient in the output's place
    return 2 * numel(grad_output) * math.prod(weight_size[1:])


def _conv_transpose(out, input, weight, *args, **kwargs):
    return 2 * numel(input) * math.prod(weight.shape[1:])


def _window(out, input, kernel_size, *args, **kwargs):
    kh, kw = _pair(kernel_size)
    return numel(_first(out)) * kh * kw


def _window1d(out, input, kernel_size, *args, **kwargs):
    k = kernel_size[0] if isinstance(kernel_size, (tuple, list)) else kernel_size
    return numel(_first(out)) * k


def _window3d(out, input, kernel_size, *args, **kwargs):
    kernel = (kernel_size,) * 3 if isinstance(kernel_size, int) else tuple(kernel_size)
    return numel(_first(out)) * math.prod(kernel if len(kernel) == 3 else kernel * 3)


def _attention(out, query, key, value, *args, **kwargs):
    # scores q @ k.T and the weighted sum of values, as PyTorch's FlopCounterMode counts them
    rows = math.prod(out.shape[:-1])
    return 2 * rows * key.shape[-2] * (query.shape[-1] + value.shape[-1])


def _input_elements(out, input, *args, **kwargs):
    return numel(input)


def _per_element(count):
    return lambda out, *args, **kwargs: count * _elements(out)


def _elements(out):
    """Elements of the first tensor of ``out``; 0 for arithmetic on sizes (``x.size(0) * 12`` gives a number)."""
    meta = next(_tensor_metas(out), None)
    return 0 if meta is None else numel(meta)


def _batch_norm(out, input, running_mean, running_var, weight=None, bias=None, training=False, *args, **kwargs):
    # eval mode: one scale and one shift per element; training also computes the batch mean and variance.
    return (6 if training else 2) * numel(input)


def _einsum(out, equation, *operands):
    inputs, _, output = equation.replace(" ", "").partition("->")
    sizes = {}
    for letters, meta in zip(inputs.split(","), operands):
        letters = letters.replace("...", "")
        named = meta.shape[len(meta.shape) - len(letters):] if letters else ()
        sizes.update(zip(letters, named))
    if not output and "->" not in equation:
        output = "".join(c for c in sizes if inputs.count(c) == 1)
    contracted = math.prod(size for letter, size in sizes.items() if letter not in output)
    return 2 * numel(out) * contracted


FLOP_RULES = {
    get_op("matmul"): _contracting(0), get_op("mm"): _contracting(0), get_op("bmm"): _contracting(0),
    get_op("linear"): _contracting(0), get_op("addmm"): _contracting(1), get_op("baddbmm"): _contracting(1),
    get_op("einsum"): _einsum, get_op("scaled_dot_product_attention"): _attention,
    get_op("conv2d"): _conv, get_op("conv1d"): _conv, get_op("conv3d"): _conv, get_op("conv_transpose2d"): _conv_transpose,
    get_op("conv2d_weight_grad"): _conv_weight_grad,
    # integer multiply-adds count like float ones: the same work in another number format
    get_op("quantized_linear"): _contracting(0), get_op("quantized_dynamic_linear"): _contracting(0),
    get_op("quantized_conv2d"): _conv,
    get_op("max_pool2d"): _window, get_op("avg_pool2d"): _window,
    get_op("max_pool1d"): _window1d, get_op("avg_pool1d"): _window1d,
    get_op("max_pool3d"): _window3d, get_op("avg_pool3d"): _window3d,
    get_op("adaptive_avg_pool2d"): _input_elements, get_op("adaptive_avg_pool3d"): _input_elements, get_op("adaptive_max_pool2d"): _input_elements,
    get_op("batch_norm"): _batch_norm,
    # mean, variance, normalise, scale, shift.
    get_op("layer_norm"): _per_element(5), get_op("group_norm"): _per_element(5),
    get_op("instance_norm"): _per_element(5), get_op("rms_norm"): _per_element(4),
    get_op("interpolate"): _per_element(1),
    get_op("dropout"): lambda out, input, p=0.5, training=True, *a, **k: numel(input) if training else 0,
    get_op("dropout2d"): lambda out, input, p=0.5, training=True, *a, **k: numel(input) if training else 0,
}

KIND_FLOPS = {
    "elementwise": _per_element(1),
    "reduction": lambda out, *args, **kwargs: sum(numel(m) for m in _tensor_metas(args)),
    "random": _per_element(1),
    "view": lambda out, *args, **kwargs: 0,
    "shape": lambda out, *args, **kwargs: 0,
    "other": lambda out, *args, **kwargs: 0,
}

_MOVES_NO_DATA = ("view", "shape")


def op_cost(op, args, kwargs, out):
    """The `Cost` of ``op`` applied to metas ``args``/``kwargs`` giving ``out``."""
    rule = FLOP_RULES.get(op) or KIND_FLOPS.get(op.kind)
    if rule is None:
        raise ShapeError(f"cost: the {op.kind} op {op.name!r} has no FLOP rule; add one to "
                         f"fxkit.transforms.cost.FLOP_RULES")
    flops = rule(out, *args, **kwargs)
    if op.kind in _MOVES_NO_DATA:
        return Cost(flops)
    return Cost(flops, nbytes((args, kwargs)), nbytes(out))


class CostModel(ShapeInference):
    """`ShapeInference` that also records ``node.meta["cost"]`` (a `Cost`) for every node.

    Attributes:
        params: qualified name -> meta of each distinct parameter the graph reads.
    """

    def __init__(self, gm):
        super().__init__(gm)
        self.params = {}

    def run_node(self, n):
        result = super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n) if n.op == "call" else ((), {})
        n.meta["cost"] = self.node_cost(n, args, kwargs, result)
        return result

    def node_cost(self, n, args, kwargs, result):
        """The cost of ``n`` given its input metas and output meta."""
        if n.op == "get_attr":
            return self._param_cost(n.target, result, self.fetch_attr(n.target))
        if n.op != "call":
            return ZERO
        if isinstance(n.target, Op):
            return op_cost(n.target, args, kwargs, result)
        if n.target is getattr:
            return ZERO
        module = self.fetch_attr(n.target) if type(n.target) is str else None
        prefix = n.target + "." if module is not None else ""
        return self._body_cost(self.bodies[n].graph, module, prefix)

    def _body_cost(self, graph, module, prefix):
        tensors = dict(module.named_parameters()) if isinstance(module, Module) else {}
        total = ZERO
        for node in graph.nodes:
            out = node.meta.get("tensor_meta")
            if node.op == "get_attr":
                total = total + self._param_cost(prefix + node.target, out, tensors.get(node.target))
            elif node.op == "call" and node.target is not getattr:
                args = map_arg(node.args, lambda m: m.meta["tensor_meta"])
                kwargs = map_arg(node.kwargs, lambda m: m.meta["tensor_meta"])
                if isinstance(node.target, Op):
                    total = total + op_cost(node.target, args, kwargs, out)
                else:  # a wrapped function called inside the body: its own traced body
                    total = total + self._body_cost(trace_body(node.target, args, kwargs).graph, None, "")
        return total

    def _param_cost(self, qualname, meta, value):
        if not isinstance(value, Parameter) or not isinstance(meta, TensorMeta):
            return ZERO
        self.params[qualname] = meta
        return Cost(params=numel(meta), param_bytes=nbytes(meta))


def estimate_cost(gm, *input_specs):
    """Annotate every node with ``meta["cost"]`` (and shapes) and return the graph's total `Cost`.

    Args:
        gm: the `GraphModule`.
        *input_specs: as for `infer_shapes`; when omitted, the placeholders'
            ``meta["tensor_meta"]`` from an earlier `infer_shapes` or `ShapeProp`.

    Returns:
        The total: FLOPs and bytes summed over nodes; parameters counted once each.
    """
    specs = input_specs or _recorded_inputs(gm)
    model = CostModel(gm)
    model.run(*(spec_meta(s) for s in specs))
    total = ZERO
    for node in gm.graph.nodes:
        c = node.meta["cost"]
        total = total + Cost(c.flops, c.bytes_read, c.bytes_written)
    for meta in model.params.values():
        total = total + Cost(params=numel(meta), param_bytes=nbytes(meta))
    return total


def _recorded_inputs(gm):
    specs = []
    for node in gm.graph.find_nodes(op="placeholder"):
        meta = node.meta.get("tensor_meta")
        if not isinstance(meta, TensorMeta):
            raise ShapeError(f"cost: the input %{node.name} has no recorded shape; pass input specs "
                             f"(estimate_cost(gm, (8, 3, 224, 224))) or run infer_shapes/ShapeProp first")
        specs.append(meta)
    return specs


def format_count(value, unit=""):
    """``4.11 G`` for big ints, the expression text for symbolic ones."""
    if isinstance(value, Sym):
        return f"{value}{' ' + unit if unit else ''}"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value} {unit}".rstrip()


def summary(gm, *input_specs, console=None):
    """Print a profiler-like rich table: per node its target, shape, FLOPs, parameters and bytes; totals last.

    Args:
        gm: the `GraphModule`.
        *input_specs: as for `estimate_cost`.
        console: a ``rich.console.Console``; defaults to stdout.

    Returns:
        The total `Cost`.
    """
    from rich.console import Console  # rich loads slowly; only the table needs it
    from rich.table import Table
    from rich.text import Text

    total = estimate_cost(gm, *input_specs)
    # Imported models (fxkit.from_torch) name the torch submodule of each node: shown as a column.
    modules = any(node.module_path for node in gm.graph.nodes)
    table = Table("node", *(["module"] if modules else []), "target", "shape", "FLOPs", "params", "bytes read",
                  "bytes written", title=f"{type(gm).__name__}: cost per node")
    for node in gm.graph.nodes:
        c = node.meta["cost"]
        if node.op == "output":
            continue
        table.add_row(Text(node.name), *([Text(node.module_path)] if modules else []), Text(format_target(node)),
                      Text(format_type(node.meta)), format_count(c.flops), format_count(c.params),
                      format_count(c.bytes_read, "B"), format_count(c.bytes_written, "B"))
    table.add_row("total", *([""] if modules else []), "", "", format_count(total.flops), format_count(total.params),
                  format_count(total.bytes_read, "B"), format_count(total.bytes_written, "B"), style="bold")
    table.caption = (f"{format_count(total.flops, 'FLOPs')} = {format_count(total.macs, 'MACs')}, "
                     f"{format_count(total.params)} parameters ({format_count(total.param_bytes, 'B')})")
    (console or Console()).print(table)
    return total
