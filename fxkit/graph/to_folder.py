"""`GraphModule.to_folder`: a GraphModule as an importable Python package (torch.fx's ``to_folder``).

``gm.to_folder("out", "FxModule")`` writes ``out/__init__.py`` (``from .module
import FxModule``), ``out/module.py`` (a ``fxkit.nn.Module`` subclass: an
``__init__`` rebuilding the submodules and loading the weights, and the
generated ``forward``) and ``out/state_dict.npz``. ``from out import FxModule;
FxModule()(x)`` then equals ``gm(x)``.

The source is an `ast` tree rendered by ``ast.unparse``, like the generated
forward: names and constants are AST nodes, never pasted text. torch.fx pickles
what it cannot write as code; fxkit writes only what it can rebuild: built-in
``fxkit.nn`` layers from their constructor arguments, containers child by child,
functions the forward calls imported from their modules, and tensors through the
``.npz`` file. Anything else (a function defined inside another, a submodule that
is itself a GraphModule) is refused with a `GraphError` naming it.
"""
import ast
import copy
import os

import numpy as np

from fxkit.errors import GraphError
from fxkit.runtime.dtypes import DType
from fxkit.runtime import nn
from fxkit.runtime.nn import Module, Parameter
from fxkit.runtime.op import Op

_LOAD, _STORE = ast.Load(), ast.Store()
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
_WEIGHTS = "state_dict.npz"


def write_folder(gm, folder, module_name="FxModule"):
    """Write ``gm`` to ``folder`` as a package whose class ``module_name`` rebuilds it."""
    if not module_name.isidentifier():
        raise GraphError(f"to_folder: the class name {module_name!r} is no valid identifier")
    os.makedirs(folder, exist_ok=True)
    code = gm.graph.python_code(root="self")
    weights = {}
    init = [_expr(_call(_attr(_call(_name("super"), []), "__init__"), []))]
    init.append(_assign("_weights", _call(_attr(_name("numpy"), "load"), [_call(
        _attr(_attr(_name("os"), "path"), "join"),
        [_call(_attr(_attr(_name("os"), "path"), "dirname"), [_name("__file__")]), ast.Constant(_WEIGHTS)])])))
    init += _build_tree(gm, "", weights)
    state = _call(_name("dict"), [_name("_weights")])
    init.append(_expr(_call(_attr(_name("self"), "load_state_dict"), [state])))
    init.append(_expr(_call(_attr(_name("self"), "train"), [ast.Constant(bool(gm.training))])))
    forward = copy.deepcopy(code.tree.body[0])
    init_fn = ast.FunctionDef("__init__", ast.arguments(posonlyargs=[], args=[ast.arg("self")], vararg=None,
                                                        kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
                              init, [], None)
    cls = ast.ClassDef(module_name, [_attr(_name("fxkit"), "nn", "Module")], [], [init_fn, forward], [])
    body = [ast.Import([ast.alias("os")]), ast.Import([ast.alias("numpy")]), ast.Import([ast.alias("fxkit")]),
            ast.ImportFrom("fxkit", [ast.alias("ops")], 0)]
    body += _globals(code.globals)
    body.append(cls)
    tree = ast.fix_missing_locations(ast.Module(body, []))
    with open(os.path.join(folder, "module.py"), "w") as f:
        f.write(f'"""{module_name}: written by fxkit GraphModule.to_folder."""\n' + ast.unparse(tree) + "\n")
    init_tree = ast.Module([ast.ImportFrom("module", [ast.alias(module_name)], 1)], [])
    with open(os.path.join(folder, "__init__.py"), "w") as f:
        f.write(ast.unparse(ast.fix_missing_locations(init_tree)) + "\n")
    np.savez(os.path.join(folder, _WEIGHTS), **weights)


def _build_tree(module, path, weights):
    """Statements adding ``module``'s children (containers recursively) and its own tensors."""
    owner = _owner(path)
    out = []
    for key, tensor in list(module._parameters.items()) + list(module._buffers.items()):
        if tensor is None:
            continue
        qualname = f"{path}.{key}" if path else key
        weights[qualname] = tensor.cpu().numpy()
        value = _call(_attr(_name("fxkit"), "from_numpy"), [ast.Subscript(_name("_weights"), ast.Constant(qualname),
                                                                          _LOAD)])
        if key in module._parameters:
            value = _call(_attr(_name("fxkit"), "nn", "Parameter"), [value])
            out.append(_expr(_call(_attr(owner, "register_parameter"), [ast.Constant(key), value])))
        else:
            persistent = key not in module._non_persistent_buffers_set
            out.append(_expr(_call(_attr(owner, "register_buffer"), [ast.Constant(key), value],
                                   {"persistent": ast.Constant(persistent)})))
    for key, child in module._modules.items():
        if child is None:
            continue
        qualname = f"{path}.{key}" if path else key
        cls = type(child)
        if cls is Module or cls in _CONTAINERS:
            out.append(_expr(_call(_attr(owner, "add_module"), [ast.Constant(key), _call(_class(cls, qualname), [])])))
            out += _build_tree(child, qualname, weights)
            continue
        if not cls.__module__.startswith(("fxkit.runtime.nn", "fxkit.nn")) or hasattr(child, "graph"):
            raise GraphError(f"to_folder: submodule {qualname!r} is a {cls.__qualname__}, which to_folder cannot "
                             f"rebuild from code (only fxkit.nn layers and containers); save the module with "
                             f"fxkit.save(gm, path) instead")
        for name, tensor in child.state_dict().items():
            weights[f"{qualname}.{name}"] = tensor.cpu().numpy()
        kwargs = {k: _literal(v, f"the argument {k!r} of submodule {qualname!r}") for k, v in
                  child._init_kwargs().items()}
        out.append(_expr(_call(_attr(owner, "add_module"), [ast.Constant(key), _call(_class(cls, qualname), [],
                                                                                      kwargs)])))
    return out


def _owner(path):
    if not path:
        return _name("self")
    return _call(_attr(_name("self"), "get_submodule"), [ast.Constant(path)])


def _class(cls, qualname):
    if getattr(nn, cls.__name__, None) is cls:
        return _attr(_name("fxkit"), "nn", cls.__name__)
    raise GraphError(f"to_folder: submodule {qualname!r} is a {cls.__qualname__}, which is not exported by fxkit.nn")


def _globals(names):
    """Statements binding the globals the generated forward reads (functions by import, literals by value)."""
    out = []
    for name, value in names.items():
        if name in ("fxkit", "ops"):
            continue
        if isinstance(value, Op):
            out.append(_assign(name, _attr(_name("ops"), value.name)))
        elif callable(value) and hasattr(value, "__qualname__"):
            module, qualname = getattr(value, "__module__", None) or "builtins", value.__qualname__
            if "<" in qualname or module == "__main__":
                raise GraphError(f"to_folder: the graph calls {qualname} of {module}, which cannot be imported "
                                 f"from another file; define it at a module's top level")
            out.append(ast.Import([ast.alias(module)]))
            out.append(_assign(name, _attr(_name(module.split(".")[0]), *module.split(".")[1:], *qualname.split("."))))
        else:
            out.append(_assign(name, _literal(value, f"the constant {name!r} of the generated forward")))
    return out


def _literal(value, what):
    if isinstance(value, DType):
        return _attr(_name("fxkit"), value.name)
    if value is None or type(value) in (bool, int, float, str, complex, bytes):
        return ast.Constant(value)
    if type(value) in (tuple, list):
        items = [_literal(v, what) for v in value]
        return ast.Tuple(items, _LOAD) if type(value) is tuple else ast.List(items, _LOAD)
    if type(value) is dict:
        return ast.Dict([_literal(k, what) for k in value], [_literal(v, what) for v in value.values()])
    if isinstance(value, Parameter):
        raise GraphError(f"to_folder: {what} is a Parameter; register it on the module instead")
    raise GraphError(f"to_folder: {what} is a {type(value).__name__}, which to_folder cannot write as code")


# -- ast helpers ------------------------------------------------------------------------
def _name(identifier):
    return ast.Name(identifier, _LOAD)


def _attr(value, *names):
    for n in names:
        value = ast.Attribute(value, n, _LOAD)
    return value


def _call(func, args, kwargs=None):
    return ast.Call(func, args, [ast.keyword(k, v) for k, v in (kwargs or {}).items()])


def _expr(value):
    return ast.Expr(value)


def _assign(name, value):
    return ast.Assign([ast.Name(name, _STORE)], value)
