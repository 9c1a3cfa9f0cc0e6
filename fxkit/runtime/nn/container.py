"""Containers: `Sequential`, `ModuleList`, `ModuleDict`.

They hold submodules under their index (``"0"``, ``"1"``, ...) or key, so the
qualified names (``layer1.0.conv1``) and state_dict keys match PyTorch's.
The tracer looks through them: they are never leaves.
"""
import operator
from collections import OrderedDict

from fxkit.errors import IndexOutOfRangeError
from fxkit.runtime.nn.module import Module, add_indent


def _index(idx, size, owner):
    """``idx`` (possibly negative) as a position in ``range(size)``."""
    try:
        idx = operator.index(idx)
    except TypeError:
        raise TypeError(f"{owner} indices must be integers or slices, not {type(idx).__name__}") from None
    if not -size <= idx < size:
        raise IndexOutOfRangeError(f"{owner} index {idx} is out of range (it holds {size} modules)")
    return idx % size


class _Positional(Module):
    """What `Sequential` and `ModuleList` share: children in order, reached by position."""

    def __setitem__(self, idx, module):
        key = list(self._modules)[_index(idx, len(self._modules), type(self).__name__)]
        setattr(self, key, module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        if isinstance(idx, slice):
            doomed = keys[idx]
        else:
            doomed = [keys[_index(idx, len(keys), type(self).__name__)]]
        for key in doomed:
            delattr(self, key)
        # NOTE: renumber like PyTorch so indices stay 0..n-1.
        self.__dict__["_modules"] = {str(i): m for i, m in enumerate(self._modules.values())}

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def pop(self, idx):
        """Remove the module at position ``idx`` and return it."""
        module = self[idx]
        del self[idx]
        return module


class Sequential(_Positional):
    """Modules run one after the other, each on the previous one's output.

    Example:
        >>> model = nn.Sequential(nn.Conv2d(1, 20, 5), nn.ReLU(), nn.Conv2d(20, 64, 5))
        >>> model[0]
        Conv2d(1, 20, kernel_size=(5, 5), stride=(1, 1))
        >>> nn.Sequential(OrderedDict([("fc", nn.Linear(4, 2))])).fc
        Linear(in_features=4, out_features=2, bias=True)
    """

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], (dict, OrderedDict)):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    def forward(self, input):
        """Run the modules in order, each on the previous one's output."""
        for module in self._modules.values():
            input = module(input)
        return input

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(idx, len(self._modules), type(self).__name__)]

    def append(self, module):
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        """Append each module of ``modules``; returns self."""
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        """Put ``module`` before position ``index`` (``len(self)`` appends)."""
        if not isinstance(module, Module):
            raise TypeError(f"Sequential.insert: expected a Module, got {type(module).__name__}")
        n = len(self._modules)
        if not -n <= index <= n:
            raise IndexOutOfRangeError(f"Sequential.insert: index {index} is out of range (it holds {n} modules)")
        if index < 0:
            index += n
        items = list(self._modules.values())
        items.insert(index, module)
        self.__dict__["_modules"] = {str(i): m for i, m in enumerate(items)}
        return self


class ModuleList(_Positional):
    """A list of modules whose parameters are registered (a Python list's are not).

    Example:
        >>> layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        >>> len(list(layers.parameters()))
        6
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self._modules), type(self).__name__))]

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return type(self)(list(self) + list(other))

    def append(self, module):
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        """Append each module of the iterable ``modules``; returns self."""
        if isinstance(modules, (Module, str)) or not hasattr(modules, "__iter__"):
            raise TypeError(f"ModuleList.extend should be called with an iterable of modules, "
                            f"got {type(modules).__name__}")
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        """Put ``module`` before position ``index``."""
        items = list(self._modules.values())
        items.insert(index, module)
        self.__dict__["_modules"] = {}
        for i, m in enumerate(items):
            self.add_module(str(i), m)

    def __repr__(self):
        # PyTorch folds runs of identical children: "(0-2): 3 x Linear(...)".
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        runs = []
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = []
        for start, end, r in runs:
            text = f"({start}): {r}" if start == end else f"({start}-{end}): {end - start + 1} x {r}"
            lines.append(add_indent(text, 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules whose parameters are registered, in insertion order.

    Example:
        >>> heads = nn.ModuleDict({"cls": nn.Linear(8, 10), "box": nn.Linear(8, 4)})
        >>> heads["box"].out_features
        4
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        """Remove every module."""
        self._modules.clear()

    def pop(self, key):
        """Remove the module under ``key`` and return it."""
        module = self[key]
        del self[key]
        return module

    def keys(self):
        """The keys, in insertion order."""
        return self._modules.keys()

    def items(self):
        """``(key, module)`` pairs, in insertion order."""
        return self._modules.items()

    def values(self):
        """The modules, in insertion order."""
        return self._modules.values()

    def update(self, modules):
        """Add modules from a mapping or an iterable of ``(key, module)`` pairs."""
        pairs = modules.items() if hasattr(modules, "items") else modules
        for entry in pairs:
            key, module = entry
            self[key] = module
