"""`Namespace`: the one place identifiers for generated code are made.

Every name a graph or its generated code uses (node names, parameter names,
globals) comes from a `Namespace`, which turns any string into a valid,
unique Python identifier. Because names are sanitised here and constants go
through the AST, nothing a user puts in a graph can change what the generated
code does (torch.fx's ``_Namespace`` plays the same role).
"""
import keyword
import re
import unicodedata

# Names generated code relies on, besides Python's keywords. ``__debug__``
# cannot be assigned; the rest are globals and builtins the code generator emits.
RESERVED = frozenset(keyword.kwlist) | {"__debug__", "self", "fxkit", "ops", "getattr", "slice"}

_SUFFIX = re.compile(r"(.*)_(\d+)$")
_INVALID = re.compile(r"[^0-9A-Za-z_]")


def is_plain_identifier(name):
    """True when ``name`` reads back as itself in Python source: an identifier,
    no keyword, and stable under the NFKC normalisation the parser applies."""
    if not name.isidentifier() or keyword.iskeyword(name):
        return False
    return name.isascii() or unicodedata.normalize("NFKC", name) == name


def sanitize(candidate):
    """Any string -> an identifier close to it (``"layer1.0.conv"`` -> ``layer1_0_conv``).

    The result may still be a keyword; `Namespace.create_name` suffixes those.
    """
    name = str(candidate)
    if is_plain_identifier(name) or keyword.iskeyword(name):
        return name
    if name.isascii():  # the common case: dotted paths like "layer1.0.conv1"
        name = _INVALID.sub("_", name)
        return name if name[:1].isidentifier() else "_" + name
    name = unicodedata.normalize("NFKC", name)
    name = "".join(c if ("_" + c).isidentifier() else "_" for c in name)
    if not name[:1].isidentifier():
        name = "_" + name
    if not is_plain_identifier(name) and not keyword.iskeyword(name):
        # Normalisation can leave compositions that are not stable; ASCII always is.
        name = _INVALID.sub("_", name)
        if not name[:1].isidentifier():
            name = "_" + name
    return name


class Namespace:
    """Unique, valid identifiers from arbitrary candidates.

    Example:
        >>> ns = Namespace()
        >>> ns.create_name("add"), ns.create_name("add"), ns.create_name("return")
        ('add', 'add_1', 'return_1')
    """

    __slots__ = ("_used", "_reserved", "_counters", "_by_object")

    def __init__(self, reserved=()):
        self._used = set()
        self._reserved = RESERVED | frozenset(reserved)
        self._counters = {}
        self._by_object = {}

    def create_name(self, candidate, obj=None):
        """A fresh identifier based on ``candidate``.

        Args:
            candidate: any string; sanitised into an identifier.
            obj: when given, the object the name stands for: asking again for the
                same object returns the same name.

        Returns:
            A valid identifier, no keyword or reserved name, not returned before.
        """
        if obj is not None:
            known = self._by_object.get(id(obj))
            if known is not None:
                return known[1]
        name = sanitize(candidate)
        if name in self._used or name in self._reserved:
            match = _SUFFIX.match(name)
            base, number = (match.group(1), int(match.group(2))) if match else (name, 0)
            number = max(number, self._counters.get(base, 0))
            while True:
                number += 1
                name = f"{base}_{number}"
                if name not in self._used and name not in self._reserved:
                    break
            self._counters[base] = number
        self._used.add(name)
        if obj is not None:
            # Keep obj alive with its name so its id cannot be reused by another object.
            self._by_object[id(obj)] = (obj, name)
        return name

    def __contains__(self, name):
        return name in self._used

    def copy(self):
        """An independent namespace with the same names taken."""
        other = Namespace()
        other._reserved = self._reserved
        other._used = set(self._used)
        other._counters = dict(self._counters)
        other._by_object = dict(self._by_object)
        return other
