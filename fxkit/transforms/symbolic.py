"""`Sym`: symbolic tensor dimensions for shape inference (``N``, ``2*N``, ``(N + 1)//2``).

Shape rules in the registry do plain arithmetic on dims, so a `Sym` standing
for a named dimension flows through them unchanged: ``N * 196``, ``N + N``
and the conv/pool output size ``(N + 2*1 - 3)//2 + 1`` all work and print
readably. An expression is kept as a sum of integer-weighted products of
atoms (names, floor divisions, remainders) plus a constant; results that
lose every symbol come back as plain ints.

Symbols stand for positive integers, which decides many comparisons
(``N >= 1``, ``2*N > N``, ``N + 1 == N`` is False); a comparison the
expression cannot decide (``N == 4``), or ``int(N)``, raises `ShapeError`
saying which dimension a concrete value was needed for.

Example:
    >>> n = Sym.symbol("N")
    >>> str(n * 196), str(n + n), str((n + 2 - 3) // 2 + 1)
    ('N*196', '2*N', '(N + 1)//2')
"""
import numbers

from fxkit.errors import ShapeError


class _Atom:
    """A factor of a product: a name, ``num // den`` or ``num % den``."""

    __slots__ = ("kind", "num", "den", "key", "text")

    def __init__(self, kind, num, den=None):
        self.kind, self.num, self.den = kind, num, den
        if kind == "name":
            self.key, self.text = ("name", num), num
        else:
            self.key = (kind, _key_of(num), _key_of(den))
            self.text = f"{_grouped(num)}{'//' if kind == 'floordiv' else ' % '}{_grouped(den)}"

    def lower(self):
        """A lower bound of the atom's value (symbols are >= 1), or None."""
        if self.kind == "name":
            return 1
        low = _lower(self.num)
        if low is None or low < 0:
            return None
        if self.kind == "mod":
            return 0
        return low // self.den if type(self.den) is int and self.den > 0 else 0


class Sym:
    """An integer expression over named dimensions; see the module docstring.

    Build symbols with `Sym.symbol`; combine them with ``+ - * // %`` and ints.
    """

    __slots__ = ("terms", "const", "_hash")

    def __init__(self, terms, const=0):
        # terms: canonical monomial key -> [coefficient, atoms in display order, coefficient printed last]
        self.terms = terms
        self.const = const
        self._hash = None

    @staticmethod
    def symbol(name):
        """The dimension called ``name`` (a Python identifier, e.g. ``"N"``)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ShapeError(f"symbolic dimension names are identifiers like 'N' or 'batch', got {name!r}")
        return _monomial((_Atom("name", name),))

    @property
    def free_symbols(self):
        """The names this expression depends on."""
        found = set()
        for _, atoms, _ in self.terms.values():
            for atom in atoms:
                found |= {atom.num} if atom.kind == "name" else _names(atom.num) | _names(atom.den)
        return found

    def subs(self, **values):
        """The expression with the named dimensions replaced by ints (or other expressions).

        Example:
            >>> ((Sym.symbol("N") + 1) // 2).subs(N=7)
            4
        """
        total = self.const
        for coef, atoms, _ in self.terms.values():
            product = coef
            for atom in atoms:
                if atom.kind == "name":
                    product = product * values.get(atom.num, Sym.symbol(atom.num))
                else:
                    num, den = _subs(atom.num, values), _subs(atom.den, values)
                    product = product * (num // den if atom.kind == "floordiv" else num % den)
            total = total + product
        return total

    # -- arithmetic -----------------------------------------------------------------------
    def __add__(self, other):
        if type(other) is int:
            return _fold_floordiv(Sym(self.terms, self.const + other)) if other else self
        if not isinstance(other, Sym):
            return NotImplemented
        terms = {k: list(v) for k, v in self.terms.items()}
        for k, (coef, atoms, last) in other.terms.items():
            if k in terms:
                terms[k][0] += coef
                if terms[k][0] == 0:
                    del terms[k]
            else:
                terms[k] = [coef, atoms, last]
        return _normal(terms, self.const + other.const)

    __radd__ = __add__

    def __neg__(self):
        return self._scale(-1, None)

    def __pos__(self):
        return self

    def __sub__(self, other):
        if type(other) is int or isinstance(other, Sym):
            return self + (-other)
        return NotImplemented

    def __rsub__(self, other):
        if type(other) is int:
            return (-self) + other
        return NotImplemented

    def __mul__(self, other):
        if type(other) is int:
            return self._scale(other, True)
        if not isinstance(other, Sym):
            return NotImplemented
        result = 0
        mine = list(self.terms.values()) + ([[self.const, (), False]] if self.const else [])
        theirs = list(other.terms.values()) + ([[other.const, (), False]] if other.const else [])
        for c1, a1, last1 in mine:
            for c2, a2, last2 in theirs:
                atoms = a1 + a2
                result = result + (_monomial(atoms, c1 * c2, last1 or last2) if atoms else c1 * c2)
        return result

    def __rmul__(self, other):
        if type(other) is int:
            return self._scale(other, False)
        return NotImplemented

    def _scale(self, factor, coef_last):
        if factor == 0:
            return 0
        terms = {k: [c * factor, atoms, last if coef_last is None or factor in (1, -1) else coef_last]
                 for k, (c, atoms, last) in self.terms.items()}
        return Sym(terms, self.const * factor)

    def __floordiv__(self, other):
        if type(other) is int:
            if other == 0:
                raise ZeroDivisionError(f"symbolic dimension {self} // 0")
            if other == 1:
                return self
            if other > 0 and all(c % other == 0 for c, _, _ in self.terms.values()):
                return _normal({k: [c // other, a, l] for k, (c, a, l) in self.terms.items()}, self.const // other)
            inner = self._single_atom()
            if inner is not None and inner.kind == "floordiv" and type(inner.den) is int and other > 0:
                return inner.num // (inner.den * other)  # (a // b) // c == a // (b * c) for b, c > 0
            return _monomial((_Atom("floordiv", self, other),))
        if not isinstance(other, Sym):
            return NotImplemented
        exact = self._exact_quotient(other)
        return exact if exact is not None else _monomial((_Atom("floordiv", self, other),))

    def __rfloordiv__(self, other):
        if type(other) is int:
            return 0 if other == 0 else _monomial((_Atom("floordiv", other, self),))
        return NotImplemented

    def __mod__(self, other):
        if type(other) is int:
            if other == 0:
                raise ZeroDivisionError(f"symbolic dimension {self} % 0")
            if all(c % other == 0 for c, _, _ in self.terms.values()):
                return self.const % other
            return _monomial((_Atom("mod", self, other),))
        if not isinstance(other, Sym):
            return NotImplemented
        return 0 if self._exact_quotient(other) is not None else _monomial((_Atom("mod", self, other),))

    def __rmod__(self, other):
        if type(other) is int:
            return _monomial((_Atom("mod", other, self),))
        return NotImplemented

    def __truediv__(self, other):
        raise ShapeError(f"true division of the symbolic dimension {self} by {other}: dimensions stay integers; "
                         f"use // (floor division)")

    __rtruediv__ = __truediv__

    def _single_atom(self):
        if self.const == 0 and len(self.terms) == 1:
            (coef, atoms, _), = self.terms.values()
            if coef == 1 and len(atoms) == 1:
                return atoms[0]
        return None

    def _exact_quotient(self, other):
        """``self / other`` when ``other`` is one product dividing every term of ``self``, else None."""
        if other.const or len(other.terms) != 1 or self.const:
            return None
        (ocoef, oatoms, _), = other.terms.values()
        quotient = 0
        for coef, atoms, last in self.terms.values():
            rest = list(atoms)
            for atom in oatoms:
                match = next((i for i, a in enumerate(rest) if a.key == atom.key), None)
                if match is None:
                    return None
                del rest[match]
            if coef % ocoef:
                return None
            quotient = quotient + (_monomial(tuple(rest), coef // ocoef, last) if rest else coef // ocoef)
        return quotient

    # -- comparisons ----------------------------------------------------------------------
    def _decide(self, other, op, test):
        if not isinstance(other, (int, Sym)) or isinstance(other, bool):
            return NotImplemented
        diff = self - other
        if type(diff) is int:
            return test(diff, diff)
        low, neg_low = _lower(diff), _lower(-diff)
        high = None if neg_low is None else -neg_low
        answer = test(low, high)
        if answer is None:
            raise ShapeError(f"cannot decide {self} {op} {other} for the symbolic dimension(s) "
                             f"{', '.join(sorted(self.free_symbols))}: a shape rule or a leaf layer's forward "
                             f"needs a concrete value here; give this dimension as an int")
        return answer

    def __eq__(self, other):
        return self._decide(other, "==", _equal)

    def __ne__(self, other):
        return self._decide(other, "!=", lambda lo, hi: None if _equal(lo, hi) is None else not _equal(lo, hi))

    def __lt__(self, other):
        return self._decide(other, "<", lambda lo, hi: True if hi is not None and hi < 0
                            else (False if lo is not None and lo >= 0 else None))

    def __le__(self, other):
        return self._decide(other, "<=", lambda lo, hi: True if hi is not None and hi <= 0
                            else (False if lo is not None and lo > 0 else None))

    def __gt__(self, other):
        return self._decide(other, ">", lambda lo, hi: True if lo is not None and lo > 0
                            else (False if hi is not None and hi <= 0 else None))

    def __ge__(self, other):
        return self._decide(other, ">=", lambda lo, hi: True if lo is not None and lo >= 0
                            else (False if hi is not None and hi < 0 else None))

    def __bool__(self):
        return self != 0

    def __hash__(self):
        if self._hash is None:
            self._hash = hash(_key_of(self))
        return self._hash

    def __int__(self):
        raise ShapeError(f"the symbolic dimension {self} has no concrete value: this shape rule needs an int "
                         f"here; give the dimension(s) {', '.join(sorted(self.free_symbols))} as ints")

    __index__ = __int__

    # -- text -----------------------------------------------------------------------------
    def __str__(self):
        parts = []
        for coef, atoms, last in self.terms.values():
            size = abs(coef)
            alone = len(atoms) == 1 and coef == 1
            body = "*".join(a.text if a.kind == "name" or alone else f"({a.text})" for a in atoms)
            text = body if size == 1 else (f"{body}*{size}" if last else f"{size}*{body}")
            parts.append(("-" if coef < 0 else "+", text))
        if self.const:
            parts.append(("-" if self.const < 0 else "+", str(abs(self.const))))
        sign, first = parts[0]
        out = ("-" if sign == "-" else "") + first
        for sign, text in parts[1:]:
            out += f" {sign} {text}"
        return out

    def __repr__(self):
        return f"Sym({self})"

    def __reduce__(self):
        return (_rebuild, (self.terms, self.const))


def _equal(lo, hi):
    """Whether a difference with bounds ``lo <= d <= hi`` (None: unbounded) is 0; None if unknown."""
    if lo == hi == 0:
        return True
    if (lo is not None and lo > 0) or (hi is not None and hi < 0):
        return False
    return None


def _rebuild(terms, const):
    return Sym(terms, const)


def _monomial(atoms, coef=1, coef_last=False):
    key = tuple(sorted(a.key for a in atoms))
    return Sym({key: [coef, atoms, coef_last]})


def _normal(terms, const):
    """An int when no symbol is left; floor divisions absorb the constant added to them."""
    if not terms:
        return const
    return _fold_floordiv(Sym(terms, const))


def _fold_floordiv(expr):
    # a // d + k == (a + k*d) // d: conv/pool sizes read (N + 1)//2, not (N - 1)//2 + 1.
    if expr.const and len(expr.terms) == 1:
        (coef, atoms, _), = expr.terms.values()
        if coef == 1 and len(atoms) == 1 and atoms[0].kind == "floordiv" and type(atoms[0].den) is int \
                and atoms[0].den > 0:
            return (atoms[0].num + expr.const * atoms[0].den) // atoms[0].den
    return expr


def _key_of(value):
    if isinstance(value, Sym):
        return (tuple(sorted((k, v[0]) for k, v in value.terms.items())), value.const)
    return value


def _subs(value, values):
    return value.subs(**values) if isinstance(value, Sym) else value


def _names(value):
    return value.free_symbols if isinstance(value, Sym) else set()


def _grouped(value):
    if isinstance(value, Sym) and (value.const or len(value.terms) > 1):
        return f"({value})"
    return str(value)


def _lower(value):
    """A lower bound of an int or `Sym` with symbols >= 1, or None when unbounded below."""
    if type(value) is int:
        return value
    total = value.const
    for coef, atoms, _ in value.terms.values():
        if coef < 0:
            return None
        low = 1
        for atom in atoms:
            bound = atom.lower()
            if bound is None:
                return None
            low *= bound
        total += coef * low
    return total


def dim_of(spec):
    """A dimension from a spec item: ints stay ints, names become `Sym` symbols."""
    if isinstance(spec, Sym):
        return spec
    if isinstance(spec, str):
        return Sym.symbol(spec)
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool) and spec >= 0:
        return int(spec)
    raise ShapeError(f"a dimension is a non-negative int or a name like 'N', got {spec!r}")
