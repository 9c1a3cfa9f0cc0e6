"""The model named on the command line: finding it, building it, its inputs, tracing it.

A model spec is one of

* a zoo name: ``resnet50`` (``fxkit.models.names()`` lists them); the zoo
  gives example input shapes too;
* ``package.module:attr``: imported like Python imports it, with the current
  directory on the path (a console script's path does not have it);
* ``path/to/file.py:attr``: the file is loaded as a module (its folder goes on
  the path, so it can import its neighbours).

``attr`` (dotted for nested attributes) is an ``fxkit.nn.Module`` instance, a
Module class, or a factory function; classes and factories are called without
arguments and may return ``(model, example_input_shapes)`` like the zoo.
Models are put in eval mode, as the zoo's are.

Inputs come from ``--input 1,3,224,224`` (one per forward argument; a name
like ``N`` is a symbolic size; ``:int64`` after the shape sets that input's
dtype) or else from the model's example shapes; ``--dtype`` sets the dtype of
inputs without their own.
"""
import difflib
import importlib
import importlib.util
import inspect
import itertools
import math
import os
import pathlib
import sys
from typing import NamedTuple

from fxkit.errors import FxkitError, ModelSpecError, ShapeError
from fxkit.runtime import nn
from fxkit.runtime.dtypes import DType, from_name

_FILE_NUMBERS = itertools.count()
MAX_ELEMENTS = 2 ** 31
"""The most elements one ``--input`` may have (8 GB of float32): more is a typo, not a model input."""
FORMS = "a zoo name (resnet50), package.module:factory_or_class, or path/to/file.py:factory_or_class"


class LoadedModel(NamedTuple):
    """A model built from a spec.

    Attributes:
        model: the ``fxkit.nn.Module`` (in eval mode).
        name: how messages name it (the spec).
        example_shapes: input shapes the zoo or the factory gave, or None.
    """

    model: nn.Module
    name: str
    example_shapes: list


def load_model(spec, dtype_name=None):
    """Build the model ``spec`` names.

    Args:
        spec: the MODEL argument.
        dtype_name: ``--dtype``; a floating-point dtype casts the model's floating-point
            parameters and buffers too, so that its inputs and weights agree.

    Raises:
        ModelSpecError: nothing by that name, an import that fails, an attribute
            that is no model, a constructor needing arguments or failing, a model
            file calling ``sys.exit``.
    """
    loaded = _load(spec)
    dtype = from_name(dtype_name) if dtype_name else None
    if dtype is not None and dtype.is_floating_point:
        loaded.model.to(dtype)
    return loaded


def _load(spec):
    module_part, colon, attr = spec.rpartition(":")
    if not colon:
        if spec.endswith(".py") or os.path.isfile(spec):
            raise ModelSpecError(f"model spec {spec!r} names a file but not what in it to build\n  hint: write "
                                 f"{spec}:ATTR, where ATTR is a Module instance, a Module class or a function "
                                 f"building one, defined in {spec}")
        return _zoo_model(spec)
    if not module_part or not attr:
        raise ModelSpecError(f"model spec {spec!r} is incomplete; name {FORMS}")
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        module = _load_file(spec, module_part)
    else:
        module = _import(spec, module_part)
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise _missing(spec, module, attr)
        obj = getattr(obj, part)
    model, shapes = _build(spec, attr, obj)
    return LoadedModel(model.eval(), spec, shapes)


def _missing(spec, module, attr):
    """The error for an attribute the module lacks, listing what it offers."""
    offered = sorted(name for name, value in vars(module).items()
                     if not name.startswith("_") and _is_candidate(value, module))
    close = difflib.get_close_matches(attr, offered, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    listing = ", ".join(offered) if offered else "no Module classes, instances or functions"
    return ModelSpecError(f"model spec {spec!r}: module {module.__name__!r} has no attribute {attr!r}\n"
                          f"  hint: {hint}it defines {listing}")


def _is_candidate(value, module):
    if isinstance(value, nn.Module):
        return True
    if inspect.isclass(value):
        return issubclass(value, nn.Module) and value.__module__ == module.__name__
    return inspect.isfunction(value) and value.__module__ == module.__name__


def _zoo_model(spec):
    import fxkit.models as zoo

    if spec in zoo.names():
        model, shapes = zoo.get(spec)
        return LoadedModel(model, spec, shapes)
    close = difflib.get_close_matches(spec, zoo.names(), n=1)
    if close:
        hint = f"did you mean {close[0]!r}?"
    elif "." in spec:
        module, _, attr = spec.rpartition(".")
        hint = f"to name {attr!r} of module {module!r}, separate them with a colon: {module}:{attr}"
    else:
        hint = f"name {FORMS}"
    raise ModelSpecError(f"no zoo model named {spec!r}; the zoo has {', '.join(zoo.names())}\n  hint: {hint}")


def _import(spec, module_name):
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise ModelSpecError(f"model spec {spec!r}: no module named {exc.name!r} (looked in {cwd} and on "
                                 f"sys.path)\n  hint: run fxkit from the folder holding the package, install it, "
                                 f"or name the file: path/to/file.py:attr") from None
        raise ModelSpecError(f"model spec {spec!r}: importing {module_name!r} failed: {exc}") from exc
    except FxkitError:
        raise
    except SystemExit as exc:
        raise _exited(spec, f"importing {module_name!r}", exc) from None
    except Exception as exc:
        raise ModelSpecError(f"model spec {spec!r}: importing {module_name!r} raised "
                             f"{type(exc).__name__}: {exc}") from exc


def _load_file(spec, filename):
    """The module of a model file, run under a private name.

    NOTE: a file named ``fxkit.py`` or ``random.py`` must not replace the module of
    that name: the file is registered as ``_fxkit_model_<n>_<stem>`` and its folder
    goes at the end of ``sys.path`` (its neighbours import, and never shadow
    the standard library or installed packages).
    """
    path = pathlib.Path(filename).expanduser().resolve()
    if not path.is_file():
        raise ModelSpecError(f"model spec {spec!r}: there is no file {filename!r} (from {os.getcwd()})")
    stem = path.stem if path.stem.isidentifier() else "file"
    name = f"_fxkit_model_{next(_FILE_NUMBERS)}_{stem}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except FxkitError:
        raise
    except SystemExit as exc:
        raise _exited(spec, f"running {filename}", exc) from None
    except Exception as exc:
        raise ModelSpecError(f"model spec {spec!r}: running {filename} raised {type(exc).__name__}: {exc}") from exc
    return module


def _exited(spec, doing, exc):
    """The error for a model file that called ``sys.exit`` (an exit is no model, even with status 0)."""
    return ModelSpecError(f"model spec {spec!r}: {doing} called sys.exit({exc.code!r}) instead of defining a "
                          f"model\n  hint: guard the script part of the file with "
                          f"`if __name__ == \"__main__\":`; fxkit runs the file to build the model")


def _build(spec, attr, obj):
    """``(model, example shapes or None)`` from a Module instance, a Module class or a factory."""
    if isinstance(obj, nn.Module):
        return obj, None
    if not callable(obj):
        raise ModelSpecError(f"model spec {spec!r}: {attr} is a {type(obj).__name__}, not an fxkit.nn.Module, "
                             f"a Module class or a function building one")
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind()
        except TypeError:
            raise ModelSpecError(f"model spec {spec!r}: {attr}{signature} needs arguments, and the command line "
                                 f"builds models without any\n  hint: give the arguments defaults, or write a "
                                 f"factory taking none: def build(): return {attr}(...)") from None
    try:
        result = obj()
    except FxkitError:
        raise
    except SystemExit as exc:
        raise _exited(spec, f"building the model with {attr}()", exc) from None
    except Exception as exc:
        raise ModelSpecError(f"model spec {spec!r}: building the model with {attr}() raised "
                             f"{type(exc).__name__}: {exc}") from exc
    shapes = None
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module):
        result, shapes = result
        shapes = [tuple(s) for s in shapes]
    if not isinstance(result, nn.Module):
        raise ModelSpecError(f"model spec {spec!r}: {attr}() returned a {type(result).__name__}, not an "
                             f"fxkit.nn.Module (or a (model, input shapes) pair)")
    return result, shapes


# -- inputs --------------------------------------------------------------------------------------
def parse_input(text, dtype=None):
    """An input spec from ``--input`` text: ``"1,3,224,224"`` -> ``(1, 3, 224, 224)``,
    ``"N,784"`` -> ``("N", 784)``, ``"8,16:int64"`` -> ``((8, 16), int64)``.

    Args:
        text: the option's value.
        dtype: the `DType` for an input naming none (``--dtype``); None keeps float32.

    Raises:
        ShapeError: a dimension that is neither a size nor a name.
        DTypeError: an unknown dtype name.
    """
    shape_text, colon, dtype_name = text.partition(":")
    if colon:
        dtype = from_name(dtype_name.strip())
    cleaned = shape_text.strip().strip("()[]").strip().rstrip(",")
    dims = []
    for part in cleaned.split(",") if cleaned else []:
        part = part.strip()
        if part.isascii() and part.isdigit():
            dims.append(int(part))
        elif part.isidentifier():
            dims.append(part)
        else:
            what = "a negative size" if part.startswith("-") and part[1:].isdigit() else "not a dimension"
            raise ShapeError(f"--input {text!r}: {part!r} is {what}\n  hint: write the sizes separated "
                             f"by commas, like 1,3,224,224 (a name like N is a symbolic size; add :int64 for "
                             f"another dtype)")
    if not dims:
        raise ShapeError(f"--input {text!r} names no dimensions\n  hint: write the sizes separated by commas, "
                         f"like 1,3,224,224")
    numel = math.prod(d for d in dims if isinstance(d, int))
    if numel > MAX_ELEMENTS:
        raise ShapeError(f"--input {text!r} has {numel:,} elements, more than the {MAX_ELEMENTS:,} fxkit's command "
                         f"line takes for one input\n  hint: check the sizes for a typo; a name like N gives a "
                         f"symbolic size")
    shape = tuple(dims)
    return (shape, dtype) if dtype is not None else shape


def input_specs(loaded, texts, dtype_name=None):
    """The input specs of a command: parsed ``--input`` texts, else the model's example shapes, else None.

    Args:
        loaded: the `LoadedModel`.
        texts: the ``--input`` values (possibly empty).
        dtype_name: ``--dtype`` (None: float32).
    """
    dtype = from_name(dtype_name) if dtype_name else None
    if texts:
        return [parse_input(t, dtype) for t in texts]
    if loaded.example_shapes is None:
        return None
    return [(shape, dtype) if dtype is not None else shape for shape in loaded.example_shapes]


def require_inputs(loaded, specs, command):
    """``specs``, or a `ShapeError` saying the command needs ``--input``."""
    if specs is None:
        raise ShapeError(f"fxkit {command}: {loaded.name} has no example input shapes\n  hint: give one "
                         f"--input per forward argument, like --input 1,3,224,224")
    return specs


def concrete(specs, command):
    """``specs`` when every dimension is a number; a `ShapeError` for symbolic ones (``N``)."""
    for spec in specs:
        shape = spec[0] if len(spec) == 2 and isinstance(spec[1], DType) else spec
        if any(not isinstance(d, int) for d in shape):
            raise ShapeError(f"fxkit {command} runs or balances the model, so it needs concrete sizes; got "
                             f"--input {','.join(str(d) for d in shape)}\n  hint: replace names like N by numbers")
    return specs


def trace(loaded, specs, console, shapes=True):
    """Trace ``loaded.model`` (with a progress spinner), checking ``specs`` fit its inputs.

    Args:
        loaded: the `LoadedModel`.
        specs: the input specs, or None when unknown.
        console: the stderr console showing progress.
        shapes: also run `infer_shapes` with ``specs`` (when known), so the
            graph prints and draws with shapes.

    Raises:
        ShapeError: the number of specs differs from the forward's inputs.
        TraceError: the model cannot be traced (the message names its line).
    """
    from fxkit.tracer import symbolic_trace

    with console.status(f"tracing {loaded.name}"):
        gm = symbolic_trace(loaded.model)
    if specs is None:
        return gm
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    required = sum(1 for n in inputs if not n.args)
    if not required <= len(specs) <= len(inputs):
        names = ", ".join(n.name for n in inputs)
        raise ShapeError(f"{loaded.name} takes {len(inputs)} inputs ({names}); got {len(specs)} input shapes\n"
                         f"  hint: give one --input per forward argument, in order")
    if shapes:
        from fxkit.transforms import infer_shapes

        with console.status(f"inferring shapes of {loaded.name}"):
            infer_shapes(gm, *specs)
    return gm
