"""`DataParallel`: one process, one thread per device, the batch split between them (``torch.nn.DataParallel``).

Each call scatters the inputs' batch over ``device_ids``, runs a replica of
the model on each device in its own thread, and gathers the outputs on
``output_device``. A replica on another device than the model's holds its
parameters as ``p.to(device)``: differentiable copies, so ``backward()`` on
the gathered output sends every replica's gradient back through the copy
into the original parameter, where they add up; a device the model is
already on uses the model itself. NumPy and cupy release the GIL inside
their kernels, so the threads run in parallel where the work is in arrays
(the talk's point: a single Python process can saturate several GPUs).
"""
import threading

from fxkit.errors import DeviceError, ShapeError
from fxkit.runtime.device import Device, cpu, cuda
from fxkit.runtime.nn.module import Module
from fxkit.runtime.registry import get_op
from fxkit.runtime.tensor import Tensor

_cat = get_op("cat")


class DataParallel(Module):
    """Run ``module`` over several devices in one process, splitting the batch along ``dim``.

    Args:
        module: the model, on ``device_ids[0]`` or on the cpu.
        device_ids: devices (``"cpu"``, ``"cuda:1"``, ints for cuda indices); all
            cuda devices by default, or the cpu when there are none.
        output_device: where outputs are gathered (``device_ids[0]`` by default).
        dim: the batch dimension.

    Example:
        >>> model = fxkit.nn.DataParallel(Net().to("cuda:0"), device_ids=[0, 1])
        >>> loss = F.nll_loss(model(x), y)     # half the batch on each GPU
        >>> loss.backward()                   # gradients summed into Net's parameters
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        if device_ids is None:
            device_ids = list(range(cuda.device_count())) if cuda.is_available() else ["cpu"]
        if not device_ids:
            raise DeviceError("DataParallel: device_ids is empty; pass at least one device")
        self.module = module
        self.__dict__["devices"] = [_device(d) for d in device_ids]
        self.__dict__["output_device"] = _device(output_device) if output_device is not None else self.devices[0]
        self.dim = dim

    def _home(self):
        for p in self.module.parameters():
            return p.device
        return cpu

    def forward(self, *inputs, **kwargs):
        home = self._home()
        chunks = _scatter(inputs, self.devices, self.dim)
        replicas = [self.module if d is home else _replicate(self.module, d) for d in self.devices[:len(chunks)]]
        results = [None] * len(chunks)
        errors = [None] * len(chunks)

        def run(i):
            try:
                with self.devices[i].activate():
                    results[i] = replicas[i](*chunks[i], **kwargs)
            except BaseException as exc:  # noqa: BLE001  (re-raised on the caller's thread)
                errors[i] = exc

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(1, len(chunks))]
        for t in threads:
            t.start()
        run(0)
        for t in threads:
            t.join()
        for i, exc in enumerate(errors):
            if exc is not None:
                exc.add_note(f"in DataParallel's replica on {self.devices[i]}")
                raise exc
        return _gather(results, self.output_device, self.dim)

    def extra_repr(self):
        return f"device_ids={[str(d) for d in self.devices]}, output_device={self.output_device}, dim={self.dim}"


def _device(d):
    return Device(f"cuda:{d}" if isinstance(d, int) else str(d))


def _scatter(inputs, devices, dim):
    """Per device, its slice of every Tensor input (others are passed to each replica as they are)."""
    sizes = {t.shape[dim] for t in inputs if isinstance(t, Tensor)}
    if len(sizes) > 1:
        raise ShapeError(f"DataParallel: the tensor inputs disagree on the size of dim {dim} ({sorted(sizes)}); "
                         f"every tensor input is split along the batch dimension")
    if not sizes:
        return [inputs]
    n = sizes.pop()
    step = -(-n // len(devices)) if n else 1
    bounds = [(a, min(a + step, n)) for a in range(0, max(n, 1), step)]

    def part(t, a, b, device):
        if not isinstance(t, Tensor):
            return t
        piece = t[(slice(None),) * dim + (slice(a, b),)]
        return piece if piece.device is device else piece.to(device)

    return [tuple(part(t, a, b, devices[i]) for t in inputs) for i, (a, b) in enumerate(bounds)]


def _replicate(module, device):
    """A copy of ``module``'s tree whose parameters and buffers are differentiable copies on ``device``."""

    def copy(m):
        r = object.__new__(type(m))
        r.__dict__.update(m.__dict__)
        d = r.__dict__
        d["_parameters"] = {k: None if p is None else p.to(device) for k, p in m._parameters.items()}
        d["_buffers"] = {k: None if b is None else b.to(device) for k, b in m._buffers.items()}
        d["_modules"] = {k: None if c is None else copy(c) for k, c in m._modules.items()}
        return r

    return copy(module)


def _gather(results, device, dim):
    first = results[0]
    if isinstance(first, Tensor):
        parts = [r if r.device is device else r.to(device) for r in results]
        if first.ndim == 0:
            parts = [p.reshape(1) for p in parts]
            return _cat(parts, 0)
        return _cat(parts, dim)
    if isinstance(first, (tuple, list)):
        return type(first)(_gather([r[i] for r in results], device, dim) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: _gather([r[k] for r in results], device, dim) for k in first}
    return first
