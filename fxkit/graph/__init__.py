"""The graph IR: `Node`, `Graph`, `GraphModule`, `Interpreter`, `Transformer`."""
from fxkit.graph.graph import Graph
from fxkit.graph.graph_module import GraphModule
from fxkit.graph.interpreter import Interpreter
from fxkit.graph.node import Node, SourceLocation, map_aggregate, map_arg
from fxkit.graph.transformer import Transformer, Value

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "SourceLocation", "Transformer", "Value",
           "map_aggregate", "map_arg"]
