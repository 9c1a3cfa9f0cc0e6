"""The graph IR: `Node`, `Graph`, `GraphModule`, `Interpreter`, `Transformer`."""
from fxkit.graph.attributes import assign_attr, fetch_attr
from fxkit.graph.call_targets import called_graph, register_target_kind
from fxkit.graph.graph import Graph
from fxkit.graph.graph_module import GraphModule
from fxkit.graph.interpreter import Interpreter
from fxkit.graph.node import Node, SourceLocation, map_aggregate, map_arg
from fxkit.graph.transformer import Transformer, Value
from fxkit.graph.value import NodeValue

__all__ = ["Graph", "GraphModule", "Interpreter", "Node", "NodeValue", "SourceLocation", "Transformer", "Value",
           "assign_attr", "called_graph", "fetch_attr", "map_aggregate", "map_arg", "register_target_kind"]
