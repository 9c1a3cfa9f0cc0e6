"""Parameter names registry ops had before they took PyTorch's (issue 15), for old saved files.

``fxkit.save`` stores a call's keyword arguments by name. Files of format version 2 or
older were written when most ops named their inputs ``a``, ``b``, ``inp`` or ``x``;
`current_kwargs` renames such keywords to today's names (``add(a=x, b=y)`` becomes
``add(input=x, other=y)``) so those files keep loading. Positional arguments never changed.
"""

_RENAMES = (
    ({'a': 'input'}, """
        abs all amax amin any argmax argmin bitwise_not bool ceil chunk clamp contiguous cos cumsum dim
        double empty_like erf exp expand expm1 flatten flip float floor full_like gather gelu half index_add
        index_put index_select int isnan leaky_relu log log1p log_softmax logical_not logsumexp long
        masked_fill max mean min narrow neg norm numel numpy_T ones_like permute prod rand_like randn_like
        reciprocal relu repeat reshape roll round rsqrt scatter scatter_add sigmoid sign silu sin size
        softmax sqrt squeeze std sum swapaxes swapdims t tanh tile to transpose tril triu unbind unflatten
        unsqueeze var view zeros_like"""),
    ({'a': 'input', 'b': 'other'}, """
        add bitwise_and bitwise_or bitwise_xor div eq floor_divide ge gt le logical_and logical_or
        logical_xor lt matmul maximum minimum mul ne remainder sub where"""),
    ({'a': 'mat1', 'b': 'mat2', 'inp': 'input'}, """
        addmm"""),
    ({'a': 'batch1', 'b': 'batch2', 'inp': 'input'}, """
        baddbmm"""),
    ({'a': 'input', 'b': 'mat2'}, """
        bmm mm"""),
    ({'a': 'input', 'b': 'end'}, """
        lerp"""),
    ({'x': 'input'}, """
        linear"""),
    ({'tensor': 'input'}, """
        one_hot"""),
    ({'a': 'input', 'b': 'exponent'}, """
        pow"""),
    ({'a': 'input', 'split_size_or_sections': 'split_size'}, """
        split"""),
)

RENAMED = {name: dict(renames) for renames, names in _RENAMES for name in names.split()}


def current_kwargs(op_name, kwargs):
    """``kwargs`` of a saved call of the registry op ``op_name`` with old parameter names made current."""
    renames = RENAMED.get(op_name)
    if not renames or not any(k in renames for k in kwargs):
        return kwargs
    return {renames.get(k, k): v for k, v in kwargs.items()}
