"""`Module`: the base class of every layer and model, following ``torch.nn.Module``.

Parameters, buffers and submodules live in three dicts (``_parameters``,
``_buffers``, ``_modules``) and are reached through ``__getattr__``, exactly as
in PyTorch. The tracer relies on that: while it traces, it patches
``Module.__getattr__`` to turn parameter reads into ``get_attr`` nodes and
``Module.__call__`` to decide which submodules stay leaves. Both paths are kept
short because eager speed (a ResNet forward against PyTorch's) is measured.
"""
from collections import OrderedDict, namedtuple

import numpy as np

from fxkit.errors import DTypeError
from fxkit.runtime import dtypes as _dt
from fxkit.runtime.autograd.tensor_api import zero_grads
from fxkit.runtime.device import Device
from fxkit.runtime.nn.parameter import Parameter
from fxkit.runtime.nn.state_dict import load_into
from fxkit.runtime.tensor import Tensor


class IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What `Module.load_state_dict` did not match (PyTorch's ``_IncompatibleKeys``)."""

    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class Module:
    """Base class of layers and models.

    Subclasses call ``super().__init__()`` first, assign Parameters and Modules
    as attributes, and define ``forward``; calling the module runs ``forward``.

    Example:
        >>> class Net(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = nn.Linear(4, 2)
        ...     def forward(self, x):
        ...         return F.relu(self.fc(x))
        >>> Net()(fxkit.randn(3, 4)).shape
        (3, 2)
    """

    def __init__(self):
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = {}

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def _init_kwargs(self):
        """Constructor arguments that rebuild this module with ``cls(**kwargs)``.

        A plain Module and the containers take none (their children are
        rebuilt one by one); every built-in layer overrides this with its
        JSON-able arguments, which fxkit's data-only save format stores.
        """
        return {}

    # -- attribute protocol ----------------------------------------------------
    def __getattr__(self, name):
        d = self.__dict__
        try:
            params = d["_parameters"]
        except KeyError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' "
                                 f"(was Module.__init__() called?)") from None
        if name in params:
            return params[name]
        buffers = d["_buffers"]
        if name in buffers:
            return buffers[name]
        modules = d["_modules"]
        if name in modules:
            return modules[name]
        if name == "forward":
            raise AttributeError(f"Module [{type(self).__name__}] is missing the required forward() method; "
                                 f"define `def forward(self, ...)` in the class")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name, value):
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _discard(name, d, d["_buffers"], d["_modules"], d["_non_persistent_buffers_set"])
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                f"(fxkit.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _discard(name, d, params, d["_buffers"], d["_non_persistent_buffers_set"])
            d["_modules"][name] = value
        elif params is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                f"(fxkit.nn.Module or None expected)")
            d["_modules"][name] = None
        elif params is not None and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                f"(fxkit.Tensor or None expected)")
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if name in d.get(table, ()):
                del d[table][name]
                d["_non_persistent_buffers_set"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(dir(type(self))) + list(self.__dict__)
        keys += list(self._parameters) + list(self._modules) + list(self._buffers)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    # -- registration ------------------------------------------------------------
    def _check_new_name(self, name, kind, table):
        if not isinstance(name, str):
            raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
        if name == "":
            raise KeyError(f'{kind} name must not be the empty string ""')
        if "." in name:
            raise KeyError(f'{kind} name must not contain ".", got {name!r}')
        if hasattr(self, name) and name not in table:
            raise KeyError(f"{kind} name {name!r}: attribute '{name}' already exists on "
                           f"{type(self).__name__} (forward, train, ... are methods); choose another name")

    def register_parameter(self, name, param):
        """Add ``param`` (a Parameter, or None for an absent one such as ``bias=False``)."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_new_name(name, "parameter", self._parameters)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            f"(fxkit.nn.Parameter or None required); wrap it with nn.Parameter(...)")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Add a tensor that is state but not a parameter (BatchNorm's running mean).

        Non-persistent buffers are left out of ``state_dict()``.
        """
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_new_name(name, "buffer", self._buffers)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            f"(fxkit.Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        """Add a child module (or None for a slot left empty)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_new_name(name, "module", self._modules)
        self._modules[name] = module

    register_module = add_module

    # -- traversal ----------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """``(qualified name, module)`` for this module and every descendant, pre-order."""
        if memo is None:
            memo = set()
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self, remove_duplicate=True):
        """This module and every submodule, depth first (each once)."""
        for _, module in self.named_modules(remove_duplicate=remove_duplicate):
            yield module

    def named_children(self):
        """``(name, module)`` of the direct submodules."""
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        """The direct submodules."""
        for _, module in self.named_children():
            yield module

    def _named_members(self, table, prefix, recurse, remove_duplicate):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for key, value in module.__dict__[table].items():
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + key, value

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """``(qualified name, Parameter)`` pairs in PyTorch's order; shared ones once."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        """Every parameter of this module (and its submodules when ``recurse``), each once."""
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        """``(qualified name, tensor)`` of every buffer, like `named_parameters`."""
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        """Every buffer of this module (and its submodules when ``recurse``)."""
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def get_submodule(self, target):
        """The submodule at the dotted path ``target`` ("layer1.0.conv1"); "" is self."""
        if target == "":
            return self
        module = self
        walked = []
        for item in target.split("."):
            child = module._modules.get(item) if isinstance(module, Module) else None
            if child is None:
                where = f"'{'.'.join(walked)}'" if walked else "the root"
                children = ", ".join(module._modules) or "none"
                raise AttributeError(f"get_submodule({target!r}): {module._get_name()} at {where} has no "
                                     f"attribute `{item}` (its submodules: {children})")
            module = child
            walked.append(item)
        return module

    def _get_leaf(self, target, table, kind):
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        value = module.__dict__[table].get(name)
        if value is None:
            held = ", ".join(module.__dict__[table]) or "none"
            raise AttributeError(f"get_{kind}({target!r}): {module._get_name()} has no {kind} "
                                 f"`{name}` (its {kind}s: {held})")
        return value

    def get_parameter(self, target):
        """The Parameter at the dotted path ``target`` ("layer1.0.conv1.weight")."""
        return self._get_leaf(target, "_parameters", "parameter")

    def get_buffer(self, target):
        """The buffer at the dotted path ``target`` ("bn1.running_mean")."""
        return self._get_leaf(target, "_buffers", "buffer")

    # -- state ------------------------------------------------------------------
    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Parameters and persistent buffers by qualified name, in PyTorch's order.

        Values share storage with the module's tensors; ``keep_vars=True`` gives
        the Parameter objects themselves.
        """
        if destination is None:
            destination = OrderedDict()
        for name, param in self._parameters.items():
            if param is not None:
                destination[prefix + name] = param if keep_vars else Tensor._make(param._data, param.device)
        skip = self._non_persistent_buffers_set
        for name, buf in self._buffers.items():
            if buf is not None and name not in skip:
                destination[prefix + name] = buf if keep_vars else Tensor._make(buf._data, buf.device)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy values from ``state_dict`` into this module's parameters and buffers.

        Values may be fxkit Tensors or numpy arrays, so a PyTorch checkpoint
        converted with ``{k: v.numpy() for k, v in sd.items()}`` loads as is.

        Args:
            state_dict: qualified name -> Tensor or array.
            strict: raise on missing or unexpected keys (shape mismatches always raise).
            assign: adopt the given arrays (and their dtypes) instead of copying
                into the existing storage.

        Returns:
            IncompatibleKeys(missing_keys, unexpected_keys).

        Raises:
            StateDictError: listing missing/unexpected keys and shape mismatches.
        """
        missing, unexpected = load_into(self, state_dict, strict=strict, assign=assign)
        return IncompatibleKeys(missing, unexpected)

    # -- modes and conversion -----------------------------------------------------
    def train(self, mode=True):
        """Set training mode here and in every descendant; returns self."""
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        self.__dict__["training"] = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        """Evaluation mode (``train(False)``): dropout off, BatchNorm uses running stats."""
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        """Set ``requires_grad`` on every parameter; returns self."""
        for param in self.parameters():
            param.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none=True):
        """Reset the gradient of every parameter, as ``Optimizer.zero_grad`` does.

        Args:
            set_to_none: drop the gradients (the default, like PyTorch) rather
                than filling them with zeros.
        """
        zero_grads(self.parameters(), set_to_none)

    def _apply(self, fn):
        """Replace every parameter's and buffer's data with ``fn(tensor)``.

        Parameters keep their identity (so references held elsewhere stay
        valid); buffers are rebound, as in PyTorch.
        """
        for module in self.children():
            module._apply(fn)
        for param in self._parameters.values():
            if param is not None:
                new = fn(param)
                param._data = new._data
                param.device = new.device
        buffers = self._buffers
        for name, buf in buffers.items():
            if buf is not None:
                buffers[name] = fn(buf)
        return self

    def apply(self, fn):
        """Call ``fn(module)`` on every descendant, then on self (for custom init)."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs):
        """Move to a device and/or cast floating-point tensors to a dtype.

        ``to("cuda")``, ``to(fxkit.float64)``, ``to("cuda", fxkit.float16)``,
        ``to(tensor)`` (its device and dtype). Integer buffers keep their dtype.
        """
        device, dtype = _parse_to_args(args, kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise DTypeError(f"Module.to only accepts floating point dtypes, got {dtype.name}")

        def convert(t):
            if dtype is not None and t._data.dtype.kind == "f":
                return t.to(device, dtype) if device is not None else t.to(dtype)
            return t.to(device) if device is not None else t

        return self._apply(convert)

    def cuda(self, device=None):
        """Move parameters and buffers to a cuda device (``cuda`` or ``cuda:N``); returns self."""
        return self.to(f"cuda:{device}" if isinstance(device, int) else (device or "cuda"))

    def cpu(self):
        """Move parameters and buffers to the cpu; returns self."""
        return self.to("cpu")

    def _cast_floats(self, dtype):
        return self._apply(lambda t: t.to(dtype) if t._data.dtype.kind == "f" else t)

    def float(self):
        """Cast floating-point parameters and buffers to float32; returns self."""
        return self._cast_floats(_dt.float32)

    def double(self):
        """Cast floating-point parameters and buffers to float64; returns self."""
        return self._cast_floats(_dt.float64)

    def half(self):
        """Cast floating-point parameters and buffers to float16; returns self."""
        return self._cast_floats(_dt.float16)

    # -- printing -------------------------------------------------------------------
    def _get_name(self):
        return type(self).__name__

    def extra_repr(self):
        """The layer's settings for ``repr``; built-in layers override it."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): {add_indent(repr(module), 2)}" for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        body = ""
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                body = extra_lines[0]
            else:
                body = "\n  " + "\n  ".join(lines) + "\n"
        return f"{self._get_name()}({body})"


def add_indent(text, spaces):
    """Indent every line after the first of a multi-line repr (PyTorch's ``_addindent``)."""
    lines = text.split("\n")
    if len(lines) == 1:
        return text
    pad = " " * spaces
    return lines[0] + "\n" + "\n".join(pad + line if line.strip() else "" for line in lines[1:])


def _discard(name, *tables):
    for table in tables:
        if name in table:
            if isinstance(table, set):
                table.discard(name)
            else:
                del table[name]


def _parse_to_args(args, kwargs):
    device = kwargs.pop("device", None)
    dtype = _dt.as_dtype(kwargs.pop("dtype", None))
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"Module.to() got unexpected keyword arguments {sorted(kwargs)}")
    for a in args:
        if isinstance(a, Tensor):
            device = a.device
            dtype = a.dtype if a.is_floating_point() else dtype
        elif isinstance(a, _dt.DType) or (isinstance(a, str) and a in _dt._BY_NAME):
            dtype = _dt.as_dtype(a)
        elif isinstance(a, (str, Device)):
            device = Device(a)
        elif isinstance(a, type) or isinstance(a, np.dtype):
            dtype = _dt.as_dtype(a)
        else:
            raise TypeError(f"Module.to() expects a device, a dtype or a tensor, got {a!r}")
    return device, dtype
