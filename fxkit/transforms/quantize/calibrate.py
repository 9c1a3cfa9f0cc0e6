"""`calibrate`: run representative data through a prepared model so its observers see real ranges."""
from fxkit.errors import GraphError
from fxkit.runtime.autograd import no_grad
from fxkit.runtime.tensor import Tensor


def calibrate(prepared, data, progress=True, console=None):
    """Run every batch of ``data`` through ``prepared`` (no gradients), updating its observers.

    Args:
        prepared: the module `prepare` (or `prepare_qat`) returned.
        data: an iterable of argument tuples (one item per forward argument) or of
            single tensors, e.g. ``[(x1,), (x2,)]`` or ``(images for images, _ in loader)``.
        progress: show a rich progress bar.
        console: the rich console to draw on (a new one on stdout by default).

    Returns:
        ``prepared``, calibrated.

    Raises:
        GraphError: a batch holds more or fewer items than the model takes arguments.
    """
    inputs = [n.name for n in prepared.graph.nodes if n.op == "placeholder"]
    total = len(data) if hasattr(data, "__len__") else None
    with no_grad():
        if not progress:
            for i, batch in enumerate(data):
                prepared(*batch_arguments(batch, inputs, i))
            return prepared
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task("calibrate", total=total)
            for i, batch in enumerate(data):
                prepared(*batch_arguments(batch, inputs, i))
                bar.advance(task)
    return prepared


def batch_arguments(batch, inputs, index):
    """The argument tuple of one calibration batch (a Tensor or a tuple), checked against the inputs."""
    if isinstance(batch, Tensor):
        args = (batch,)
    elif isinstance(batch, (tuple, list)):
        args = tuple(batch)
    else:
        raise GraphError(f"calibrate: batch {index} is a {type(batch).__name__}; expected a Tensor or a tuple "
                         f"of Tensors (one per argument of the model)")
    if len(args) != len(inputs):
        raise GraphError(f"calibrate: batch {index} holds {len(args)} items, but the model takes {len(inputs)} "
                         f"argument(s) ({', '.join(inputs)}); pass only the inputs, e.g. "
                         f"(images for images, labels in loader)")
    return args
