"""`CodeBlock`: an indented-block builder for generated kernel source.

Kernel source (numba loop nests, CUDA C) is built statement by statement:
nesting is a ``with`` block, so indentation can never go wrong and the
structure of the generated code is the structure of the generating code
(CuPy's ``CodeBlock`` plays the same role). Identifiers come from a
`fxkit.codegen.Namespace`; expressions are rendered from ``ast`` nodes by the
generators, so this class only joins finished lines.

Example:
    >>> block = CodeBlock()
    >>> with block.indent("for i in range(n):"):
    ...     block.line("out[i] = x[i] * x[i]")
    >>> print(block)
    for i in range(n):
        out[i] = x[i] * x[i]
"""
import contextlib


class CodeBlock:
    """Lines of source at increasing indentation.

    Args:
        indent: the text of one indentation level (four spaces for Python,
            numba included).
    """

    __slots__ = ("_lines", "_depth", "_unit")

    def __init__(self, indent="    "):
        self._lines = []
        self._depth = 0
        self._unit = indent

    def line(self, text=""):
        """Append one line at the current indentation (an empty line stays empty)."""
        if "\n" in text:
            raise ValueError(f"CodeBlock.line takes one line, got {text!r}; call it once a line")
        self._lines.append(self._unit * self._depth + text if text else "")

    def lines(self, texts):
        """Append several lines at the current indentation."""
        for text in texts:
            self.line(text)

    def extend(self, other):
        """Append another block's lines, indented to the current level."""
        for text in other._lines:
            self._lines.append(self._unit * self._depth + text if text else "")

    @contextlib.contextmanager
    def indent(self, header=None):
        """``with block.indent("for i in range(n):"):`` — the header, then an indented body.

        Without a header only the indentation changes.
        """
        if header is not None:
            self.line(header)
        self._depth += 1
        try:
            yield self
        finally:
            self._depth -= 1

    def __len__(self):
        return len(self._lines)

    def __str__(self):
        return "\n".join(self._lines) + "\n"
