"""The parameter list of a generated ``forward``: one parameter per placeholder, in order."""
import ast

from fxkit.errors import GraphError


class Signature:
    """The parameters of ``forward``, one per placeholder in order: positional ones, then (after a
    ``*args`` placeholder, whose target starts with ``*``) keyword-only ones, then ``**kwargs``."""

    def __init__(self, root):
        self.args, self.defaults = [root], []
        self.vararg = self.kwarg = None
        self.kwonly, self.kw_defaults = [], []

    def place(self, node, arg, default):
        """Add placeholder ``node`` as ``arg`` (with ``default``, an expression, or None); refuse an order
        no Python signature can have."""
        target = node.target
        if self.kwarg is not None:
            raise GraphError(f"placeholder %{node.name} follows the **{self.kwarg.arg} placeholder; "
                             f"move it before that one")
        if target.startswith("**"):
            self.kwarg = arg
        elif target.startswith("*"):
            if self.vararg is not None:
                raise GraphError(f"placeholder %{node.name} is a second *args placeholder; a function "
                                 f"takes one")
            self.vararg = arg
        elif self.vararg is not None:
            self.kwonly.append(arg)
            self.kw_defaults.append(default)
        elif default is not None:
            self.args.append(arg)
            self.defaults.append(default)
        elif self.defaults:
            raise GraphError(f"placeholder %{node.name} has no default but follows a placeholder "
                             f"with one; move it before them or give it a default")
        else:
            self.args.append(arg)

    def arguments(self):
        """The ``ast.arguments`` of ``def forward(...)``."""
        return ast.arguments(posonlyargs=[], args=self.args, vararg=self.vararg, kwonlyargs=self.kwonly,
                             kw_defaults=self.kw_defaults, kwarg=self.kwarg, defaults=self.defaults)
