"""`PassManager`: run passes in order, checking the graph and the outputs after each.

After every pass the graph is linted (a pass that left a node using a value
before its definition, or a dangling use, is caught at once and named) and the
module recompiled. Given example inputs, the manager also runs the module after
each pass and compares with the previous step's outputs: exactly for passes
that only move or remove nodes, within the pass's ``rtol``/``atol`` (see
`Pass`) for passes that change arithmetic. The first pass that breaks either
check is named in the `GraphError`.

Example:
    >>> pm = PassManager([eliminate_dead_code, FoldConvBN()], example_inputs=(x,))
    >>> gm = pm(gm)
    >>> pm.summary()            # rich table: pass, nodes before/after, time
"""
import inspect
import time
from typing import NamedTuple

import numpy as np

from fxkit.errors import FxkitError, GraphError, PassError, format_error
from fxkit.graph import GraphModule, Transformer
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.pass_base import Pass, pass_name


class PassRecord(NamedTuple):
    """What one pass did: its name, node counts before and after, seconds spent in it."""

    name: str
    nodes_before: int
    nodes_after: int
    seconds: float


class PassManager:
    """Runs ``passes`` in order on a `GraphModule`.

    Args:
        passes: callables ``GraphModule -> GraphModule`` (`Pass` instances,
            functions), `Pass` subclasses (instantiated with no options) or
            `Transformer` subclasses (run as ``cls(gm).transform()``).
        check: lint the graph after each pass.
        example_inputs: forward arguments; when given, each pass's outputs are
            compared with the previous step's.
        verbose: print the summary table after each run.
        checks: callables ``check(gm)`` run on the input and after every pass
            (torch.fx's ``PassManager.add_checks``); the exception of one that
            raises propagates with a note naming the check and the pass before it.
        steps: how many times the list of passes runs at most; a round that
            changes nothing ends it early (torch.fx's ``steps``).

    Attributes:
        records: the `PassRecord` of each pass of the last run.
    """

    def __init__(self, passes=(), check=True, example_inputs=None, verbose=False, checks=(), steps=1):
        self.passes = list(passes)
        self.checks = []
        for c in checks:
            self.add_checks(c)
        self.steps = steps
        self.constraints = []
        self.check = check
        self.example_inputs = tuple(example_inputs) if example_inputs is not None else None
        self.verbose = verbose
        self.records = []

    def __call__(self, gm):
        """Run every pass on ``gm``; the transformed module."""
        if not isinstance(gm, GraphModule):
            raise GraphError(f"PassManager: expected a GraphModule, got {type(gm).__name__}; "
                             f"trace the model first with fxkit.symbolic_trace(model)")
        self.records = []
        if self.check:
            _lint(gm, "the input (before any pass)")
        self._run_checks(gm, "on the input (before any pass)")
        expected = self._outputs(gm, "the input (before any pass)")
        for _ in range(self.steps):
            version = (id(gm.graph), gm.graph._version)
            for p in self.passes:
                gm, expected = self._run_pass(p, gm, expected)
            if (id(gm.graph), gm.graph._version) == version:
                break
        if self.verbose:
            self.summary()
        return gm

    def _run_pass(self, p, gm, expected):
        name = pass_name(p)
        before = len(gm.graph.nodes)
        start = time.perf_counter()
        result = _apply(p, gm, name)
        seconds = time.perf_counter() - start
        if not isinstance(result, GraphModule):
            # NOTE: torch.fx's infra passes may return None; fxkit's contract (DESIGN.md) is
            # GraphModule -> GraphModule, which catches a forgotten ``return gm``.
            raise GraphError(f"PassManager: pass {name!r} returned {type(result).__name__}, not a "
                             f"GraphModule; a pass returns the module it transformed (return gm)")
        if self.check:
            _lint(result, f"pass {name!r}")
        result.recompile()
        self._run_checks(result, f"after pass {name!r}")
        self.records.append(PassRecord(name, before, len(result.graph.nodes), seconds))
        if self.example_inputs is not None:
            actual = self._outputs(result, f"pass {name!r}")
            rtol, atol = getattr(p, "rtol", 0.0), getattr(p, "atol", 0.0)
            mismatch = _mismatch(actual, expected, rtol, atol, "output")
            if mismatch is not None:
                bound = "exactly" if not (rtol or atol) else f"within rtol={rtol}, atol={atol}"
                raise GraphError(format_error(
                    f"PassManager: pass {name!r} changed the outputs: {mismatch}",
                    hint=f"the outputs before the pass must be reproduced {bound}; fix the pass, or give "
                         f"it rtol/atol attributes if it changes arithmetic on purpose"))
            expected = actual
        return result, expected

    def add_pass(self, p):
        """Append ``p`` to the passes."""
        self.passes.append(p)

    def add_checks(self, check):
        """Run ``check(gm)`` on the input and after every pass (it raises to report a broken module).

        Raises:
            PassError: ``check`` is no callable taking the module as its one argument.
        """
        try:
            inspect.signature(check).bind(None)
        except (TypeError, ValueError):
            raise PassError(f"PassManager.add_checks: a check is called as check(graph_module); "
                            f"{pass_name(check)!r} cannot be") from None
        self.checks.append(check)

    def add_constraint(self, constraint):
        """Add ``constraint(a, b) -> bool``: may pass ``a`` run before pass ``b``? (`validate_constraints`)."""
        self.constraints.append(constraint)

    def validate_constraints(self):
        """Raise `GraphError` when the order of the passes breaks a constraint."""
        for constraint in self.constraints:
            for i, a in enumerate(self.passes):
                for b in self.passes[i + 1:]:
                    if not constraint(a, b):
                        raise GraphError(f"PassManager: pass {pass_name(a)!r} runs before {pass_name(b)!r}, "
                                         f"which a constraint forbids; reorder the passes")

    def _run_checks(self, gm, who):
        for check in self.checks:
            try:
                check(gm)
            except Exception as exc:
                # NOTE: the check's own exception goes on (code catching ValueError keeps working);
                # the note says where it happened.
                exc.add_note(f"PassManager: check {pass_name(check)!r} failed {who}")
                raise

    def _outputs(self, gm, who):
        if self.example_inputs is None:
            return None
        try:
            return gm(*self.example_inputs)
        except FxkitError as exc:
            raise GraphError(f"PassManager: the module after {who} fails on the example inputs:\n{exc}") from exc

    def summary(self, console=None):
        """Print a rich table of the last run (pass, nodes before/after, milliseconds).

        Args:
            console: a ``rich.console.Console``; defaults to stdout.

        Returns:
            The records shown.
        """
        from rich.console import Console  # rich loads slowly; only the summary needs it
        from rich.table import Table
        from rich.text import Text

        table = Table("pass", "nodes before", "nodes after", "change", "time (ms)", title="PassManager")
        for r in self.records:
            table.add_row(Text(r.name), str(r.nodes_before), str(r.nodes_after),
                          f"{r.nodes_after - r.nodes_before:+d}", f"{r.seconds * 1e3:.2f}")
        if self.records:
            table.add_row(Text("total"), str(self.records[0].nodes_before), str(self.records[-1].nodes_after),
                          f"{self.records[-1].nodes_after - self.records[0].nodes_before:+d}",
                          f"{sum(r.seconds for r in self.records) * 1e3:.2f}", style="bold")
        (console or Console()).print(table)
        return list(self.records)

    def __repr__(self):
        return f"PassManager([{', '.join(pass_name(p) for p in self.passes)}], check={self.check})"


def this_before_that_pass_constraint(this, that):
    """A constraint for `PassManager.add_constraint`: ``this`` must run before ``that``."""
    def depends_on(a, b):
        return a is not that or b is not this
    return depends_on


def _apply(p, gm, name):
    try:
        if isinstance(p, type) and issubclass(p, Transformer):
            return p(gm).transform()
        if isinstance(p, type) and issubclass(p, Pass):
            return p()(gm)
        return p(gm)
    except FxkitError as exc:
        message = f"in pass {name!r}: {exc}"
        try:
            wrapped = type(exc)(message)
        except TypeError:  # an error class with its own constructor
            wrapped = GraphError(message)
        raise wrapped from exc
    except Exception as exc:  # a bug in the pass: name it, keep the original as the cause
        raise GraphError(f"in pass {name!r}: {type(exc).__name__}: {exc}") from exc


def _lint(gm, who):
    try:
        gm.graph.lint()
    except GraphError as exc:
        raise GraphError(f"PassManager: {who} left a malformed graph:\n{exc}") from exc


def _mismatch(actual, expected, rtol, atol, path):
    """A description of the first difference between two nested outputs, or None."""
    if isinstance(expected, Tensor):
        if not isinstance(actual, Tensor):
            return f"{path} is {type(actual).__name__}, expected a Tensor"
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            return (f"{path} is {actual.dtype.name}{list(actual.shape)}, "
                    f"expected {expected.dtype.name}{list(expected.shape)}")
        a, e = actual.cpu().numpy(), expected.cpu().numpy()
        if rtol or atol:
            same = np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            same = np.array_equal(a, e, equal_nan=a.dtype.kind in "fc")
        if same:
            return None
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        return f"{path} differs by up to {np.nanmax(diff):.3g} ({np.count_nonzero(diff)} of {diff.size} values)"
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return f"{path} has another structure ({type(actual).__name__}, expected {type(expected).__name__} " \
                   f"of {len(expected)})"
        for i, (a, e) in enumerate(zip(actual, expected)):
            found = _mismatch(a, e, rtol, atol, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or list(actual) != list(expected):
            return f"{path} has other keys"
        for k in expected:
            found = _mismatch(actual[k], expected[k], rtol, atol, f"{path}[{k!r}]")
            if found is not None:
                return found
        return None
    return None if actual == expected else f"{path} is {actual!r}, expected {expected!r}"
