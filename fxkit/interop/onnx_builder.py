"""`OnnxBuilder`: the ONNX graph under construction while `fxkit.onnx.export` runs.

Export rules never touch protobuf directly: they ask the builder for nodes
(``b.op("Relu", x)``), constants (``b.scalar(0.5, fxkit.float32)``) and
shape tensors (``b.ints((N, 320))``). Symbolic dimensions (`Sym`) in a shape
become a few ``Shape``/``Mul``/``Div`` nodes reading the graph input that
introduced the symbol, so an exported model keeps working for any batch size.

Every name the ONNX graph gets (node names, tensor names, initializers) comes
from one namespace, so names are unique and derived from the fxkit node they
stand for (``layer1.0.conv1/conv2d``).
"""
import numpy as np

from fxkit.errors import LoweringError
from fxkit.runtime import dtypes as _dt
from fxkit.transforms.symbolic import Sym


class Value:
    """An ONNX tensor during export.

    Attributes:
        name: its ONNX name.
        meta: its fxkit `TensorMeta`.
        data: the `Tensor` of a module parameter or buffer (constants rules may read), else None.
        qparams: the scale, zero point and dtype its integers stand for (a node of a
            converted quantized graph, ``node.meta["qparams"]``), else None.
    """

    __slots__ = ("name", "meta", "data", "qparams")

    def __init__(self, name, meta, data=None, qparams=None):
        self.name = name
        self.meta = meta
        self.data = data
        self.qparams = qparams

    def __repr__(self):
        return f"Value({self.name!r}, {self.meta})"


def onnx_dtype(dtype):
    """The ``TensorProto`` element type of an fxkit `DType`."""
    import onnx

    return onnx.helper.np_dtype_to_tensor_dtype(dtype.np)


class OnnxBuilder:
    """Collects nodes and initializers; rules call its methods.

    Args:
        onnx: the imported ``onnx`` package.
        opset: the default-domain opset the graph targets.

    Attributes:
        scope: the prefix of the names made now (the fxkit node being exported).
        meta: the ``meta`` of the fxkit node being exported (``qparams`` of quantized nodes).
    """

    def __init__(self, onnx, opset):
        self.onnx = onnx
        self.opset = opset
        self.nodes = []
        self.initializers = []
        self.scope = ""
        self.meta = {}
        self._used = set()
        self._node_names = set()
        self._consts = {}
        self._params = {}
        self._symbols = {}
        self._sym_values = {}

    # -- names -------------------------------------------------------------------------
    def fresh(self, hint):
        """A tensor or node name not used yet, close to ``hint``."""
        base = str(hint) or "v"
        name, i = base, 0
        while name in self._used:
            i += 1
            name = f"{base}_{i}"
        self._used.add(name)
        return name

    def reserve(self, name):
        """Claim ``name`` exactly (graph inputs and outputs); refused when taken."""
        if name in self._used:
            raise LoweringError(f"fxkit.onnx.export: the name {name!r} is used twice; give distinct "
                                f"input_names/output_names")
        self._used.add(name)
        return name

    # -- nodes -------------------------------------------------------------------------
    def op(self, op_type, *inputs, outputs=1, domain="", **attrs):
        """Add a node; returns its output name (a list of names when ``outputs > 1``).

        ``None`` inputs are optional inputs left out: written as ``""`` between given
        inputs and dropped at the end, as the spec allows (onnxruntime's optimizers
        crash on a LayerNormalization whose bias is ``""``).
        """
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        hint = f"{self.scope}/{op_type}" if self.scope else op_type
        outs = [self.fresh(hint if outputs == 1 else f"{hint}:{i}") for i in range(outputs)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        node = self.onnx.helper.make_node(op_type, ["" if i is None else i for i in inputs], outs,
                                          name=self._node_name(hint), domain=domain or None, **attrs)
        self.nodes.append(node)
        return outs[0] if outputs == 1 else outs

    def _node_name(self, hint):
        name, i = hint, 0
        while name in self._node_names:
            i += 1
            name = f"{hint}_{i}"
        self._node_names.add(name)
        return name

    def name_results(self, names, since, hint):
        """Rename the results ``names`` made by nodes added since index ``since`` after
        ``hint`` (the fxkit node's name), so the ONNX graph reads like the fxkit one."""
        if isinstance(names, (tuple, list)):
            many = len(names) > 1
            return type(names)(self.name_results(n, since, f"{hint}:{i}" if many else hint)
                               for i, n in enumerate(names))
        if not isinstance(names, str):
            return names
        made = [n for n in self.nodes[since:] if names in n.output]
        if not made:
            return names  # an input, a constant or an earlier result: keep its name
        new = self.fresh(hint)
        for node in self.nodes[since:]:
            for field in (node.input, node.output):
                for i, name in enumerate(field):
                    if name == names:
                        field[i] = new
        return new

    # -- constants ---------------------------------------------------------------------
    def initializer(self, array, hint):
        """A constant tensor named after ``hint`` (e.g. a parameter's qualified name)."""
        name = self.fresh(hint)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.require(array, requirements="C"), name))
        return name

    def parameter(self, tensor, qualname):
        """The initializer of a module tensor; a tensor read twice is stored once."""
        name = self._params.get(id(tensor))
        if name is None:
            name = self._params[id(tensor)] = self.initializer(tensor.cpu().numpy(), qualname)
        return name

    def const(self, value, dtype):
        """A constant of fxkit ``dtype`` holding ``value`` (a number, list or array); cached."""
        array = np.asarray(value, dtype=dtype.np)
        key = (array.tobytes(), array.shape, dtype.name)
        name = self._consts.get(key)
        if name is None:
            name = self._consts[key] = self.initializer(array, f"const_{dtype.name}")
        return name

    def scalar(self, value, dtype):
        """A 0-d constant of ``dtype``."""
        return self.const(value, dtype)

    def ints(self, dims):
        """A 1-D int64 tensor of ``dims`` (ints and symbolic dimensions)."""
        dims = list(dims)
        if all(type(d) is int for d in dims):
            return self.const(dims, _dt.int64)
        parts = [self.dim(d) for d in dims]
        return parts[0] if len(parts) == 1 else self.op("Concat", *parts, axis=0)

    def reshape(self, x, shape):
        """``Reshape`` of the tensor ``x`` (a name) to ``shape`` (ints and symbolic dims); a
        single symbolic dim becomes -1, which keeps the node free of shape arithmetic."""
        dims = list(shape)
        symbolic = [i for i, d in enumerate(dims) if type(d) is not int]
        if len(symbolic) == 1 and 0 not in dims:
            dims[symbolic[0]] = -1
        return self.op("Reshape", x, self.ints(dims))

    def dim(self, d):
        """A 1-element int64 tensor holding one dimension (an int or a `Sym`)."""
        if type(d) is int:
            return self.const([d], _dt.int64)
        if not isinstance(d, Sym):
            raise LoweringError(f"a dimension must be an int or a symbolic dimension, got {type(d).__name__} {d!r}")
        key = str(d)
        name = self._sym_values.get(key)
        if name is None:
            name = self._sym_values[key] = self._emit_sym(d)
        return name

    def dim_scalar(self, d, dtype):
        """A 0-d tensor of ``dtype`` holding a dimension (a count used in arithmetic)."""
        if type(d) is int:
            return self.scalar(d, dtype)
        flat = self.op("Squeeze", self.dim(d), self.const([0], _dt.int64))
        return flat if dtype is _dt.int64 else self.op("Cast", flat, to=onnx_dtype(dtype))

    # -- symbolic dimensions -------------------------------------------------------------
    def bind_symbol(self, name, value_name, axis):
        """Symbol ``name`` is dimension ``axis`` of the graph input ``value_name``."""
        self._symbols.setdefault(name, (value_name, axis))

    def _emit_sym(self, expr):
        total = self.const([expr.const], _dt.int64) if expr.const else None
        for coef, atoms, _ in expr.terms.values():
            term = self.const([coef], _dt.int64) if coef != 1 else None
            for atom in atoms:
                factor = self._emit_atom(atom)
                term = factor if term is None else self.op("Mul", term, factor)
            total = term if total is None else self.op("Add", total, term)
        return total

    def _emit_atom(self, atom):
        if atom.kind == "name":
            if atom.num not in self._symbols:
                raise LoweringError(f"the symbolic dimension {atom.num!r} is no dimension of a graph input")
            source, axis = self._symbols[atom.num]
            return self.op("Shape", source, start=axis, end=axis + 1)
        num, den = self._operand(atom.num), self._operand(atom.den)
        # NOTE: ONNX's integer Div truncates; the dims here are positive, where that is floor division.
        return self.op("Div" if atom.kind == "floordiv" else "Mod", num, den)

    def _operand(self, value):
        return self.const([value], _dt.int64) if type(value) is int else self.dim(value)

    # -- common conversions --------------------------------------------------------------
    def cast(self, value, dtype):
        """``value`` (a `Value`) as fxkit ``dtype``: the same name when it already is."""
        if value.meta.dtype is dtype:
            return value.name
        return self.op("Cast", value.name, to=onnx_dtype(dtype))

    def operand(self, value, dtype):
        """A `Value` or a Python number as an ONNX tensor of ``dtype``."""
        if isinstance(value, Value):
            return self.cast(value, dtype)
        if isinstance(value, (bool, int, float)):
            return self.scalar(value, dtype)
        raise LoweringError(f"expected a tensor or a Python number, got {type(value).__name__} {value!r}")

    def reduce(self, op_type, x, axes, keepdims):
        """A ``Reduce*`` node over ``axes`` (None: all), with axes as an input from opset 18
        (ReduceSum: 13), as an attribute before."""
        keep = int(bool(keepdims))
        if axes is None:
            return self.op(op_type, x, keepdims=keep)
        axes = [int(a) for a in axes]
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.op(op_type, x, self.const(axes, _dt.int64), keepdims=keep)
        return self.op(op_type, x, axes=axes, keepdims=keep)
