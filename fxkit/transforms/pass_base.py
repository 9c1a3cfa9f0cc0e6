"""`Pass`: a named, configurable ``GraphModule -> GraphModule`` callable.

A pass is any callable taking a `GraphModule` and returning one; subclassing
`Pass` adds what `PassManager` reports and checks with: a ``name`` (the class
name unless set), options given to ``__init__`` shown in ``repr``, and the
tolerance its rewrite keeps outputs within (``rtol``/``atol``; both 0 means
the pass only moves or removes nodes and outputs must stay bit-identical).

Example:
    >>> class ReluToGelu(Pass):
    ...     '''Swap every relu for gelu.
    ...
    ...     before:  %relu = call[relu](%x)
    ...     after:   %gelu = call[gelu](%x)
    ...     '''
    ...     rtol, atol = 1.0, 1.0          # changes the numbers on purpose
    ...     def __call__(self, gm):
    ...         for node in gm.graph.find_nodes(op="call", target=fxkit.ops.relu):
    ...             node.target = fxkit.ops.gelu
    ...         return gm
    >>> gm = ReluToGelu()(gm)
"""
import abc


class Pass(abc.ABC):
    """Base class of fxkit passes.

    Attributes:
        name: how errors and summaries name the pass; defaults to the class name.
        rtol: relative tolerance of the pass's effect on outputs (0: exact).
        atol: absolute tolerance of the pass's effect on outputs (0: exact).
    """

    name = "Pass"
    rtol = 0.0
    atol = 0.0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    @abc.abstractmethod
    def __call__(self, gm):
        """Transform ``gm`` (in place or into a new module) and return the result."""

    def __repr__(self):
        options = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{self.name}({options})"


def pass_name(p):
    """The name errors and summaries use for ``p``: ``Pass.name``, else the function's or class's name."""
    name = getattr(p, "name", None)
    if isinstance(name, str) and name:
        return name
    func = getattr(p, "func", None)  # functools.partial
    for candidate in (p, func, type(p)):
        name = getattr(candidate, "__name__", None)
        if name:
            return name
    return repr(p)
