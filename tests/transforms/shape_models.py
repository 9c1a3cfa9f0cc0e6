"""Small models shared by the shape propagation and shape inference tests."""
from fxkit import nn


class MultiOutput(nn.Module):
    """A leaf layer, a size query, a multi-output op (chunk), a namedtuple output (max) and a tuple result."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)

    def forward(self, x):
        h = self.fc(x.relu())
        n = h.shape[0]
        a, b = h.chunk(2, 1)
        m = (a * b).max(1)
        return m.values.view(n, 1), m.indices


# str(gm.graph) after ShapeProp / infer_shapes on a (5, 4) input.
MULTI_OUTPUT_GRAPH = """\
graph(x):
    %x         : f32[5, 4]              = placeholder[x]
    %relu      : f32[5, 4]              = call[relu](%x)
    %fc        : f32[5, 6]              = call[self.fc](%relu)
    %size                               = call[size](%fc)
    %getitem                            = call[getitem](%size, 0)
    %chunk     : (f32[5, 3], f32[5, 3]) = call[chunk](%fc, 2, 1)
    %getitem_1 : f32[5, 3]              = call[getitem](%chunk, 0)
    %getitem_2 : f32[5, 3]              = call[getitem](%chunk, 1)
    %mul       : f32[5, 3]              = call[mul](%getitem_1, %getitem_2)
    %max       : (f32[5], i64[5])       = call[max](%mul, 1)
    %getattr_1 : f32[5]                 = call[builtins.getattr](%max, 'values')
    %view      : f32[5, 1]              = call[view](%getattr_1, %getitem, 1)
    %getattr_2 : i64[5]                 = call[builtins.getattr](%max, 'indices')
    return (%view, %getattr_2)"""
