"""`Interpreter`: run a `GraphModule` node by node through overridable methods.

Each opcode has a method taking ``(target, args, kwargs)`` as in torch.fx, so
an analysis (shape propagation, profiling, calibration) is a subclass that
overrides one of them. A node that fails is reported with the node and the
user's source line recorded by the tracer::

    ShapeError: matmul: mat1 and mat2 shapes cannot be multiplied (64x320 and 500x10)
      at model.py:42 in forward: y = self.fc(x)
      node: %fc = call[self.fc](%view)

Example:
    >>> class CountCalls(Interpreter):
    ...     def call(self, target, args, kwargs):
    ...         self.calls = getattr(self, "calls", 0) + 1
    ...         return super().call(target, args, kwargs)
    >>> CountCalls(gm).run(x)

One Interpreter may be shared by threads: the state of a run (``env``,
``args_iter``) is kept per thread, so concurrent ``run`` calls each see their
own values (state a subclass adds on ``self`` is its own to guard).
"""
import threading

from fxkit.errors import FxkitError, GraphError
from fxkit.graph.attributes import fetch_attr
from fxkit.graph.node import map_arg


class Interpreter:
    """Executes ``module.graph`` one node at a time.

    Args:
        module: the `GraphModule` (or any module owning the attributes the graph reads).
        garbage_collect_values: drop each value after its last use.
        graph: the graph to run; defaults to ``module.graph``.

    Attributes:
        env: node -> value of the nodes computed so far by the calling thread's last run.
        args_iter: the calling thread's remaining graph inputs.
    """

    def __init__(self, module, garbage_collect_values=True, graph=None):
        self.module = module
        self.graph = graph if graph is not None else module.graph
        self.garbage_collect_values = garbage_collect_values
        self._run_state = _RunState()
        self._frees = {}
        if garbage_collect_values:
            seen = set()
            for node in reversed(self.graph.nodes):
                for used in node.all_input_nodes:
                    if used not in seen:
                        seen.add(used)
                        self._frees.setdefault(node, []).append(used)

    @property
    def env(self):
        return self._run_state.env

    @env.setter
    def env(self, value):
        self._run_state.env = value

    @property
    def args_iter(self):
        return self._run_state.args_iter

    @args_iter.setter
    def args_iter(self, value):
        self._run_state.args_iter = value

    def run(self, *args, initial_env=None, **kwargs):
        """Run the graph on ``args`` (one per placeholder) and return its output.

        Args:
            *args: the graph inputs, in placeholder order (missing ones use defaults).
            initial_env: node -> value of nodes to take as already computed.
            **kwargs: graph inputs by placeholder name (those after a ``*args`` placeholder, and
                what a ``**kwargs`` placeholder collects).
        """
        self.env = dict(initial_env) if initial_env else {}
        self.args_iter = iter(args)
        self._run_state.kwargs = dict(kwargs)
        env = self.env
        frees = self._frees
        for node in self.graph.nodes:
            if node in env:
                continue
            try:
                env[node] = self.run_node(node)
            except Exception as exc:
                raise node_error(node, exc) from exc
            if self.garbage_collect_values:
                for dead in frees.get(node, ()):
                    env.pop(dead, None)
            if node.op == "output":
                return env[node]
        return None

    def run_node(self, n):
        """Compute node ``n``: fetch its inputs, then call the method of its opcode."""
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    def fetch_args_kwargs_from_env(self, n):
        """``n``'s args and kwargs with every input node replaced by its value."""
        return map_arg(n.args, self._value_of), map_arg(n.kwargs, self._value_of)

    def _value_of(self, node):
        try:
            return self.env[node]
        except KeyError:
            raise GraphError(f"%{node.name} has no value here: it is defined later, was erased, or "
                             f"belongs to another graph (graph.lint() says which)") from None

    # -- the four opcodes ------------------------------------------------------------
    def placeholder(self, target, args, kwargs):
        """The next positional input, or the placeholder's default; for a ``*args`` placeholder the
        remaining positional inputs as a tuple, for a ``**kwargs`` one the keyword inputs no placeholder
        took; an input given to ``run`` by keyword goes to the placeholder of that name."""
        keywords = self._run_state.kwargs
        if target.startswith("**"):
            rest = dict(keywords)
            keywords.clear()
            return rest
        if target.startswith("*"):
            return tuple(self.args_iter)
        if target in keywords:
            return keywords.pop(target)
        try:
            return next(self.args_iter)
        except StopIteration:
            if args:
                return args[0]
            raise GraphError(f"missing a value for the graph input {target!r}; pass one argument per "
                             f"placeholder to run(...)") from None

    def get_attr(self, target, args, kwargs):
        """The module attribute at the dotted path ``target``."""
        return self.fetch_attr(target)

    def call(self, target, args, kwargs):
        """Apply an `Op`, a function, or the submodule at the path ``target``."""
        if type(target) is str:
            return self.fetch_attr(target)(*args, **kwargs)
        return target(*args, **kwargs)

    def output(self, target, args, kwargs):
        """The graph's result."""
        return args[0] if args else None

    def fetch_attr(self, target):
        """Walk the dotted path ``target`` from the module (`GraphError` naming a missing part)."""
        try:
            return fetch_attr(self.module, target)
        except AttributeError as exc:
            raise GraphError(str(exc)) from None


class _RunState(threading.local):
    """One thread's run of an `Interpreter`: its values so far and its remaining inputs."""

    def __init__(self):
        self.env = {}
        self.args_iter = iter(())
        self.kwargs = {}


def node_error(node, exc):
    """``exc`` re-raised as the same fxkit error class (or GraphError), naming the node
    and its source line in fxkit's error layout."""
    message = str(exc) if isinstance(exc, FxkitError) else f"{type(exc).__name__}: {exc}"
    lines = message.split("\n")
    # The node goes above the hint: hint lines close fxkit's layout.
    at = next((i for i, line in enumerate(lines) if line.startswith("  hint:")), len(lines))
    added = []
    if node.stack is not None:
        added.append(f"  at {node.stack}")
    added.append(f"  node: {node.format_node()}")
    text = "\n".join(lines[:at] + added + lines[at:])
    kind = type(exc) if isinstance(exc, FxkitError) else GraphError
    try:
        return kind(text)
    except TypeError:  # an error class with its own constructor
        return GraphError(text)
