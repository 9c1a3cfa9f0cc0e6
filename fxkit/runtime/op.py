"""`Op`: one tensor operation, and the single dispatch point of fxkit.

An op is written once against the array module ``xp`` (numpy or cupy):
``impl(xp, *args, **kwargs)`` receives ndarrays where the caller passed
Tensors and returns ndarrays (or containers of them, or Python values).
`Op.__call__` hands calls with a tracer proxy to the tracer and otherwise
unwraps, checks devices, applies PyTorch's dtype promotion for elementwise
ops, runs the implementation and wraps the result.

Example:
    >>> @op("square", kind="elementwise", template="a * a")
    ... def square(xp, a):
    ...     return xp.multiply(a, a)
"""
import inspect

import numpy as np

from fxkit.errors import (DeviceError, DTypeError, FxkitError, IndexOutOfRangeError, ShapeError,
                          ValueRangeError)
from fxkit.runtime import dtypes as _dt
from fxkit.runtime import tracing_hook
from fxkit.runtime.autograd import grad_mode as _grad_mode
from fxkit.runtime.autograd.dispatch import record as _record
from fxkit.runtime.device import Device, cpu
from fxkit.runtime.meta import TensorMeta, broadcast_shapes
from fxkit.runtime.registry import add_op
from fxkit.runtime.tensor import Tensor
from fxkit.runtime.value_text import describe

KINDS = ("elementwise", "reduction", "matmul", "conv", "view", "shape", "random", "other")

# Promotion modes of elementwise ops: how the result dtype follows the inputs.
#   common  - PyTorch's result_type of the inputs (add, mul, maximum, where, ...)
#   float   - result_type, then integers and bools become the default float (exp, div)
#   compare - computed in result_type, result bool (eq, lt, isnan)
#   bool    - inputs read as truth values, result bool (logical_and)
#   keep    - dtype of the first input (masked_fill of an int tensor by a float stays int)
#   integer - integer or bool inputs only, result_type (bitwise_and)
PROMOTIONS = (None, "common", "float", "compare", "bool", "keep", "integer")

_ACTIVE = tracing_hook.ACTIVE
_find_proxy = tracing_hook.find_proxy
_ProxyBase = tracing_hook.ProxyBase
_EDITING = tracing_hook.EDITING
_GRAD = _grad_mode.ENABLED
_SCALARS = (int, float, bool)
_MAY_HOLD_PROXY = frozenset({list, tuple, dict, slice})  # containers `run` scans for a proxy outside a trace
_FLOAT_CATEGORY = 2
_new = object.__new__
# What numpy/cupy (and plain Python inside an impl) raise on inputs an op cannot take:
# `Op._explain` turns them into fxkit errors naming the op and its inputs.
_LIBRARY_ERRORS = (ValueError, TypeError, IndexError, AttributeError, ArithmeticError)


class Op:
    """One registered tensor operation.

    Attributes:
        name: the op's name, also ``fxkit.<name>`` and the graph's target label.
        kind: one of `KINDS`; passes key off it (fusion takes ``elementwise``).
        impl: ``impl(xp, *args, **kwargs)`` over raw arrays.
        shape_rule: ``rule(*args, **kwargs)`` over `TensorMeta` in place of
            tensors, returning TensorMeta (or a container of them, or Python
            values for shape queries); computes no data.
        promote: the dtype promotion of an elementwise op (see `PROMOTIONS`).
        template: for elementwise ops, a Python expression over the inputs
            ``a, b, c`` and keyword names, using the intrinsics of
            ``fxkit.runtime.ops.intrinsics``; fused kernels are generated from it.
        method: the Tensor method name, or None when the op is no method.
        pure: False for ops with effects or randomness; never removed or merged.
        factory: True for ops that create tensors from no tensor (``zeros``);
            they take ``device=`` and ``dtype=``.
        integer_checks: True when, for integer results, the impl raises on some input
            values (an integer division by zero, a negative integer power): a kernel
            built from the template cannot, so such calls run the impl (`kernel_template`).
        operands: for elementwise ops, how many leading arguments are tensor operands
            (tensors or numbers; anything else is refused before numpy sees it).
    """

    __slots__ = ("name", "kind", "impl", "shape_rule", "promote", "template", "method",
                 "pure", "factory", "promote_from", "grad_rule", "operands", "integer_checks", "_fast", "_signature",
                 "__wrapped__")

    def __init__(self, name, impl, *, kind, shape_rule=None, promote=None, template=None,
                 method=True, pure=True, factory=False, promote_from=0, integer_checks=False):
        if kind not in KINDS:
            raise FxkitError(f"op {name!r}: kind {kind!r} is not one of {KINDS}")
        if promote not in PROMOTIONS:
            raise FxkitError(f"op {name!r}: promote {promote!r} is not one of {PROMOTIONS}")
        self.name = name
        self.kind = kind
        self.impl = impl
        self.promote = promote
        self.template = template
        self.integer_checks = integer_checks
        self.method = name if method is True else (method or None)
        self.pure = pure
        self.factory = factory
        self.promote_from = promote_from
        self._fast = not factory and promote_from == 0
        self._signature = None
        # Elementwise ops take their tensor operands first, as the impl's parameters without defaults.
        self.operands = _required_params(self.signature) if kind == "elementwise" else 0
        self.grad_rule = None
        self.__wrapped__ = impl
        if shape_rule is None and kind == "elementwise":
            shape_rule = self._elementwise_shape_rule
        if shape_rule is None:
            raise FxkitError(f"op {name!r} needs a shape_rule (only elementwise ops get one by default)")
        self.shape_rule = shape_rule

    def __repr__(self):
        return f"<op {self.name}>"

    def kernel_template(self, dtype):
        """The template of a kernel computing this op for a ``dtype`` result, or None: also for
        integer (or unknown) results of `integer_checks` ops, whose calls keep running the impl."""
        if self.integer_checks and (dtype is None or not dtype.is_floating_point):
            return None
        return self.template

    @property
    def signature(self):
        """How the op is called: its impl's parameters after ``xp`` (an `inspect.Signature`)."""
        if self._signature is None:
            self._signature = inspect.Signature(list(inspect.signature(self.impl).parameters.values())[1:])
        return self._signature

    @property
    def __signature__(self):
        # NOTE: inspect.signature(op) would otherwise follow __wrapped__ to the impl and show its ``xp``;
        # symbolic_trace(F.relu) makes one placeholder per parameter of this.
        return self.signature

    def bind(self, args, kwargs):
        """``{parameter: value}`` of the call ``op(*args, **kwargs)``, defaults filled in.

        Raises:
            TypeError: the arguments do not fit `signature`.
        """
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments

    def __reduce__(self):
        return (_op_by_name, (self.name,))

    def __get__(self, instance, owner=None):
        # Ops stored on Tensor act as bound methods: ``x.relu()`` is ``relu(x)``.
        if instance is None:
            return self
        return _BoundOp(self, instance)

    def __call__(self, *args, **kwargs):
        if _ACTIVE:
            proxy = _find_proxy(args, kwargs)
            if proxy is not None:
                return proxy.tracer.record_op(self, args, kwargs)
        if kwargs or not self._fast:
            return self.run(args, kwargs)
        # NOTE: the fast path of `run` for positional tensors and Python scalars: the
        # per-op overhead of eager mode is measured against PyTorch's dispatch.
        device = None
        first = None
        uniform = True
        scalars = False
        tracked = False
        raw = []
        for a in args:
            if isinstance(a, Tensor):
                if a.device is not device:
                    if device is not None:
                        raise self._device_error(device, a.device)
                    device = a.device
                if a._grad is not None:
                    tracked = True
                d = a._data
                dt = d.dtype
                if first is None:
                    first = dt
                elif dt is not first and uniform and dt != first:  # identity first: dtypes are shared
                    uniform = False
                raw.append(d)
            elif type(a) in _SCALARS:
                scalars = True
                raw.append(a)
            else:
                return self.run(args, kwargs)
        if device is None:
            return self.run(args, kwargs)
        if tracked and _GRAD.value:
            return _record(self, args, kwargs)
        mode = self.promote
        try:
            if mode is not None and (not uniform or (scalars and first.kind != "f")
                                     or (mode == "float" and first.kind != "f") or mode == "integer"):
                raw = self._promote_inputs(raw)
            out = self.impl(device.xp, *raw)
        except FxkitError as exc:
            self._name_error(exc)
            raise
        except _LIBRARY_ERRORS as exc:
            raise self._explain(exc, args, kwargs) from exc
        if type(out) is np.ndarray:  # Tensor._make, inlined
            t = _new(Tensor)
            t._data = out
            t.device = device
            t._grad = None
            return t
        return _wrap(out, device)

    def run(self, args, kwargs):
        """Run eagerly: unwrap Tensors, promote, call ``impl``, wrap the result.

        A call with a tensor that takes part in autograd (``_grad`` set) goes to the
        autograd recorder, which runs it here again with recording off."""
        device = None
        tracked = False
        raw = []
        for a in args:
            if isinstance(a, Tensor):
                d = a.device
                if device is None:
                    device = d
                elif d is not device:
                    raise self._device_error(device, d)
                if a._grad is not None:
                    tracked = True
                raw.append(a._data)
            elif type(a) in (list, tuple) and a and isinstance(a[0], Tensor):
                unwrapped = []
                for t in a:
                    if not isinstance(t, Tensor):
                        # A mixed sequence (the index of ``x[t, :]``) reaches the op as given;
                        # ops taking a list of tensors (cat) refuse other items themselves.
                        unwrapped = a
                        break
                    if device is None:
                        device = t.device
                    elif t.device is not device:
                        raise self._device_error(device, t.device)
                    if t._grad is not None:
                        tracked = True
                    unwrapped.append(t._data)
                raw.append(unwrapped)
            else:
                if _EDITING[0] and (type(a) in _MAY_HOLD_PROXY or isinstance(a, _ProxyBase)):
                    proxy = _find_proxy((a,), {})
                    if proxy is not None:  # outside any trace: graph editing with Proxy(node)
                        return proxy.tracer.record_op(self, args, kwargs)
                raw.append(a)
        original_kwargs = kwargs
        if kwargs:
            kwargs = dict(kwargs)
            for k, v in kwargs.items():
                if _EDITING[0] and (type(v) in _MAY_HOLD_PROXY or isinstance(v, _ProxyBase)):
                    proxy = _find_proxy((v,), {})
                    if proxy is not None:
                        return proxy.tracer.record_op(self, args, original_kwargs)
                if isinstance(v, Tensor):
                    if device is None:
                        device = v.device
                    elif v.device is not device:
                        raise self._device_error(device, v.device)
                    if v._grad is not None:
                        tracked = True
                    kwargs[k] = v._data
            try:
                if "dtype" in kwargs:
                    kwargs["dtype"] = _dt.as_dtype(kwargs["dtype"])
                if self.factory:
                    spec = kwargs.pop("device", None)
                    if spec is not None:
                        device = Device(spec)
            except FxkitError as exc:
                self._name_error(exc)
                raise
        if self.operands:
            self._check_operands(raw)
        if tracked and _GRAD.value:
            return _record(self, args, original_kwargs)
        if device is None:
            if not self.factory:
                return self._run_on_scalars(raw, kwargs)
            device = cpu
        try:
            if self.promote is not None:
                first = raw[0] if raw else None
                if self.promote_from:
                    cut = self.promote_from
                    raw = raw[:cut] + self._promote_inputs(raw[cut:])
                else:
                    raw = self._promote_inputs(raw)
                if kwargs and raw and raw[0] is not first and kwargs.get("inplace"):
                    raise DTypeError(f"{self.name}: inplace=True can't write a {raw[0].dtype} result into the "
                                     f"{first.dtype} input; drop inplace=True or cast the input first")
            out = self.impl(device.xp, *raw, **kwargs)
        except FxkitError as exc:
            self._name_error(exc)
            raise
        except _LIBRARY_ERRORS as exc:
            raise self._explain(exc, args, kwargs) from exc
        if type(out) is np.ndarray:
            return Tensor._make(out, device)
        return _wrap(out, device)

    def _run_on_scalars(self, raw, kwargs):
        """An op given no tensor: shape arithmetic in a graph (``x.shape[0] * 2``) and
        picks from tuples (``getitem``) stay Python values; arrays still become tensors."""
        if raw and (raw[0] is None or type(raw[0]) is str):
            # An op that would hand its input back unchanged (``to``, eval-mode ``dropout``).
            raise DTypeError(f"{self.name}: expected a tensor, got {type(raw[0]).__name__} {raw[0]!r:.40}")
        try:
            out = self.impl(np, *raw, **kwargs)
        except FxkitError as exc:
            self._name_error(exc)
            raise
        except _LIBRARY_ERRORS as exc:
            raise self._explain(exc, raw, kwargs) from exc
        if isinstance(out, np.generic):
            return out.item()
        return _wrap(out, cpu)

    # -- dtype promotion -------------------------------------------------
    def _promote_inputs(self, raw):
        """Cast array inputs to the PyTorch result dtype of this op."""
        mode = self.promote
        if mode == "bool":
            return raw
        first = None
        uniform = True
        scalars = None
        for r in raw:
            t = type(r)
            if t in _SCALARS:
                if scalars is None:
                    scalars = [r]
                else:
                    scalars.append(r)
            elif r is not None and hasattr(r, "dtype"):
                if first is None:
                    first = r.dtype
                elif r.dtype != first:
                    uniform = False
        if first is None:
            return raw
        if mode == "keep":
            return raw
        if uniform and scalars is None:
            target = _dt._BY_NP.get(first)
            if target is None:
                target = _dt.from_numpy(first)
        else:
            target = self._result_dtype(raw)
        if mode == "integer" and target.category == _FLOAT_CATEGORY:
            raise DTypeError(f"{self.name}: needs integer or bool tensors, got {target.name}; "
                             f"cast with .int() or .long() first")
        if mode == "float" and target.category != _FLOAT_CATEGORY:
            target = _dt.default_float
        np_target = target.np
        if scalars is not None and np_target.kind == "V":
            # NOTE: ml_dtypes' bfloat16 (kind "V") takes Python floats as float64, not as weak
            # scalars: bfloat16 + 2.5 would be float32. Give the numbers the tensor's dtype.
            raw = [np.asarray(r, np_target) if type(r) is float else r for r in raw]
        if uniform and first == np_target:
            return raw
        return [r.astype(np_target) if hasattr(r, "dtype") and type(r) not in _SCALARS and r.dtype != np_target
                else r for r in raw]

    def _result_dtype(self, raw):
        dims, zeros, scalars = [], [], []
        for r in raw:
            if type(r) in _SCALARS:
                scalars.append(r)
            elif r is not None and hasattr(r, "dtype"):
                (zeros if r.ndim == 0 else dims).append(_dt.from_numpy(r.dtype))
        return _dt.result_type(dims, zeros, scalars)

    # -- shape rule of elementwise ops ------------------------------------
    def _elementwise_shape_rule(self, *args, **kwargs):
        metas = [a for a in args if isinstance(a, TensorMeta)]
        metas += [v for v in kwargs.values() if isinstance(v, TensorMeta)]
        if not metas:
            raise ShapeError(f"{self.name}: needs at least one tensor input")
        shape = broadcast_shapes(*(m.shape for m in metas), op_name=self.name)
        device = metas[0].device
        mode = self.promote
        if mode in ("compare", "bool"):
            dtype = _dt.bool_
        elif mode == "keep":
            dtype = metas[0].dtype
        else:
            promoted = args[self.promote_from:]
            dims = [a.dtype for a in promoted if isinstance(a, TensorMeta) and len(a.shape) > 0]
            zeros = [a.dtype for a in promoted if isinstance(a, TensorMeta) and len(a.shape) == 0]
            scalars = [a for a in promoted if type(a) in _SCALARS]
            dtype = _dt.result_type(dims, zeros, scalars)
            if mode == "float" and dtype.category != _FLOAT_CATEGORY:
                dtype = _dt.default_float
        return TensorMeta(shape, dtype, device)

    # -- errors ------------------------------------------------------------
    def _device_error(self, a, b):
        return DeviceError(
            f"{self.name}: expected all tensors on the same device, found {a} and {b}; "
            f"move them with .to('{a}') or .to('{b}')"
        )

    def _check_operands(self, raw):
        """Refuse what is neither an array nor a number where an elementwise op takes an
        operand: numpy would make an object or string array of it (``add(x, None)``)."""
        for i, r in enumerate(raw[:self.operands]):
            if type(r) not in _SCALARS and not hasattr(r, "dtype"):
                raise DTypeError(f"{self.name}: argument {i + 1} must be a tensor or a Python number, "
                                 f"got {type(r).__name__} {r!r:.40}")

    def _name_error(self, exc):
        """Prefix this op's name to an fxkit error raised without it (by a shared helper)."""
        message = str(exc.args[0]) if exc.args else ""
        if not message.startswith((self.name + ":", self.name + "(", self.name + " ")):
            exc.args = (f"{self.name}: {message}", *exc.args[1:])

    def _explain(self, exc, args, kwargs):
        """Turn an array library's error into one that names this op and its inputs."""
        described = ", ".join(describe(a) for a in args)
        if isinstance(exc, AttributeError):
            obj = getattr(exc, "obj", None)
            if hasattr(obj, "shape") and hasattr(obj, "dtype"):
                raise exc  # an array lacking an attribute: a bug in the impl, not the caller's
            # A Python value reached the impl where an array goes (``fxkit.add(x, "a")``).
            return DTypeError(f"{self.name}: expected a tensor, got {type(obj).__name__} {obj!r:.40} "
                              f"(inputs: {described})")
        if isinstance(exc, IndexError):  # numpy's AxisError is a ValueError and an IndexError
            kind = IndexOutOfRangeError
        elif isinstance(exc, TypeError):
            kind = DTypeError
        elif isinstance(exc, ArithmeticError):  # a division by zero, inf converted to an int
            kind = ValueRangeError
        else:
            kind = ShapeError
        return kind(f"{self.name}: {exc} (inputs: {described})")


class _BoundOp:
    """``x.relu`` before it is called: an op with its first argument bound."""

    __slots__ = ("op", "self_arg")

    def __init__(self, op, self_arg):
        self.op = op
        self.self_arg = self_arg

    def __call__(self, *args, **kwargs):
        return self.op(self.self_arg, *args, **kwargs)

    def __repr__(self):
        return f"<bound op {self.op.name} of {describe(self.self_arg)}>"


def _wrap(out, device):
    if isinstance(out, np.ndarray) or (device.type == "cuda" and isinstance(out, device.xp.ndarray)):
        return Tensor._make(out, device)
    if isinstance(out, np.generic):
        return Tensor._make(np.asarray(out), device)
    if isinstance(out, tuple):
        items = [_wrap(o, device) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
    if isinstance(out, list):
        return [_wrap(o, device) for o in out]
    return out


def _required_params(signature):
    """How many parameters of ``signature`` come without a default."""
    return sum(1 for p in signature.parameters.values()
               if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _op_by_name(name):
    from fxkit.runtime.registry import get_op

    return get_op(name)


def op(name, *, kind, shape_rule=None, promote=None, template=None, method=True, pure=True,
       factory=False, promote_from=0, integer_checks=False):
    """Decorator: register ``impl`` as the op ``name`` and return the `Op`."""

    def register(impl):
        return add_op(Op(name, impl, kind=kind, shape_rule=shape_rule, promote=promote,
                         template=template, method=method, pure=pure, factory=factory,
                         promote_from=promote_from, integer_checks=integer_checks))

    return register
