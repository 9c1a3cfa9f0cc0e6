"""Guards: the key a compiled module specialises on, and the checks that explain a refusal.

A specialisation is compiled for one *key*: per input its shape, numpy dtype
and device, ``((32, 128), dtype('float32'), cpu), ...``. Each call builds the
key of its inputs from attributes the Tensors already hold and compares it
with the key of the specialisation that ran last: one tuple comparison, so
the check costs well under a microsecond. Only when it differs do the slower
checks here run: that the inputs are Tensors, on a device the backend runs
on, and (for a module compiled with ``example_inputs``) of the rank, dtype
and device that signature fixed. A refused input raises before any
generated code runs, naming the input, what was expected and got, and how
to recompile.
"""
from fxkit.errors import DeviceError, DTypeError, GraphError, ShapeError, format_error
from fxkit.runtime.meta import TensorMeta
from fxkit.runtime.value_text import short_dtype
from fxkit.runtime.tensor import Tensor
from fxkit.transforms.infer_shapes import spec_meta


def input_key(tensors):
    """The specialisation key of a call's Tensors (AttributeError for anything else)."""
    return tuple([(t._data.shape, t._data.dtype, t.device) for t in tensors])


def spec_key(specs):
    """The key `input_key` gives for inputs matching ``specs`` (`TensorMeta`s)."""
    return tuple((tuple(s.shape), s.dtype.np, s.device) for s in specs)


def specs_of(tensors):
    """One `TensorMeta` per Tensor."""
    return tuple(TensorMeta(tuple(t.shape), t.dtype, t.device) for t in tensors)


def as_specs(example_inputs, who):
    """`TensorMeta`s from ``example_inputs``: Tensors, shape tuples (float32) or (shape, dtype) pairs.

    Raises:
        ShapeError: a spec has a symbolic dimension; compiled code specialises on sizes.
    """
    specs = tuple(spec_meta(s) for s in example_inputs)
    for i, spec in enumerate(specs):
        symbolic = [d for d in spec.shape if not isinstance(d, int)]
        if symbolic:
            raise ShapeError(format_error(
                f"{who}: example input {i + 1} has the symbolic dimension {symbolic[0]} "
                f"(shape {_dims(spec.shape)}); compiled code is specialised on concrete sizes",
                hint="give sizes, e.g. (32, 128); a call with other sizes compiles once more and is cached"))
    return specs


def describe(spec):
    """``f32[32, 128] on cpu``."""
    return f"{short_dtype(spec.dtype)}{_dims(spec.shape)} on {spec.device}"


def _dims(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


class InputNames:
    """The inputs of a compiled module: names for messages and how many are required.

    Args:
        names: the placeholder names, in order.
        required: how many leading inputs have no default.
        who: the module's name in messages (``compiled LSTMCell``).
    """

    def __init__(self, names, required, who):
        self.names = tuple(names)
        self.required = required
        self.who = who

    def label(self, i):
        return f"input {i + 1} ({self.names[i]})" if i < len(self.names) else f"input {i + 1}"

    def bind(self, args, kwargs):
        """Positional and keyword arguments -> the positional inputs, in placeholder order."""
        args = list(args)
        for name in self.names[len(args):]:
            if name not in kwargs:
                break
            args.append(kwargs.pop(name))
        if kwargs:
            unknown = ", ".join(sorted(kwargs))
            raise GraphError(f"{self.who}: unexpected keyword argument(s) {unknown}; its inputs are "
                             f"{', '.join(self.names)} (keywords may follow positional inputs in this order)")
        return tuple(args)

    def check(self, args, device_types, backend_name):
        """Refuse a call whose inputs no specialisation can take: count, type, device.

        Raises:
            GraphError: too few or too many inputs.
            DTypeError: an input is not a Tensor.
            DeviceError: an input on a device the backend does not run on.
        """
        if not self.required <= len(args) <= len(self.names):
            expected = (f"{self.required}" if self.required == len(self.names)
                        else f"{self.required} to {len(self.names)}")
            raise GraphError(f"{self.who} takes {expected} inputs ({', '.join(self.names)}), got {len(args)}")
        for i, a in enumerate(args):
            if not isinstance(a, Tensor):
                raise DTypeError(format_error(
                    f"{self.who}: {self.label(i)} is {type(a).__name__} {a!r:.60}; compiled modules take Tensors",
                    hint="pass fxkit.tensor(value); to fix a Python value, trace with concrete_args and "
                         "compile the traced module"))
            if a.device.type not in device_types:
                raise DeviceError(format_error(
                    f"{self.who}: {self.label(i)} is on {a.device}, but the {backend_name} backend runs on "
                    f"{' and '.join(device_types)}",
                    hint=f"move the input with .to('{device_types[0]}'), or compile for that device with a backend "
                         f"that runs there"))


class Signature:
    """The rank, dtype and device of each input fixed by ``example_inputs``.

    A compiled module given example inputs accepts other sizes (compiling once
    more) but refuses another rank, dtype or device.

    Args:
        specs: the example inputs' `TensorMeta`s.
        names: the module's `InputNames`.
    """

    def __init__(self, specs, names):
        self.specs = tuple(specs)
        self.names = names

    def check(self, args):
        """Raise when an input's rank, dtype or device differs from the example input's."""
        who = self.names.who
        recompile = "or compile again with example inputs like this one (fxkit.compile(model, example_inputs=...))"
        for i, (a, spec) in enumerate(zip(args, self.specs)):
            got = TensorMeta(tuple(a.shape), a.dtype, a.device)
            where = f"{who}: {self.names.label(i)} is {describe(got)}, compiled for {describe(spec)}"
            if a.ndim != len(spec.shape):
                raise ShapeError(format_error(
                    f"{where}: rank {a.ndim} instead of {len(spec.shape)}",
                    hint=f"pass a rank-{len(spec.shape)} tensor (reshape it), {recompile}"))
            if a.dtype is not spec.dtype:
                raise DTypeError(format_error(
                    f"{where}: dtype {a.dtype.name} instead of {spec.dtype.name}",
                    hint=f"cast it with .to(fxkit.{spec.dtype.name}), {recompile}"))
            if a.device is not spec.device:
                raise DeviceError(format_error(
                    f"{where}: device {a.device} instead of {spec.device}",
                    hint=f"move it with .to('{spec.device}'), {recompile}"))
