"""The symbolic tracer: `symbolic_trace`, `Tracer`, `Proxy`, `wrap`, `ProxyableClassMeta`, and the
data-only `save`/`load` format of traced GraphModules."""
from fxkit.tracer.proxy import Proxy
from fxkit.tracer.proxyable import ProxyableClassMeta
from fxkit.tracer.serialize import load, save
from fxkit.tracer.tracer import Tracer, symbolic_trace
from fxkit.tracer.wrap import wrap

__all__ = ["Proxy", "ProxyableClassMeta", "Tracer", "load", "save", "symbolic_trace", "wrap"]
