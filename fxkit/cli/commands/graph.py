"""``fxkit graph MODEL``: the traced graph with shapes, its generated code, or a table."""
NAME = "graph"
HELP = "print the traced graph (with shapes), its generated Python (--code) or a table (--table)"
DESCRIPTION = """\
Trace MODEL and print its graph, one node a line, with each value's dtype and
shape when input shapes are known (the zoo's example shapes, or --input).
--code prints the Python generated from the graph instead (shapes as comments),
--table the same nodes as a table; --fuse merges elementwise ops first."""
EXAMPLES = """\
examples:
  fxkit graph lenet
  fxkit graph resnet50 --input N,3,224,224 --table
  fxkit graph mlp --code
  fxkit graph lstm_cell --fuse
  fxkit graph my_models.py:Net --input 8,3,32,32"""


def configure(parser):
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--code", action="store_true", help="print the generated Python code instead of the graph")
    view.add_argument("--table", action="store_true", help="print the nodes as a table")
    parser.add_argument("--fuse", action="store_true", help="fuse elementwise ops into fused groups first")


def run(args, out, err):
    from fxkit.cli.model_spec import input_specs, load_model, trace
    from fxkit.graph.display import highlighted

    with err.status(f"building {args.model}"):
        loaded = load_model(args.model, args.dtype)
    gm = trace(loaded, input_specs(loaded, args.input, args.dtype), err)
    if args.fuse:
        from fxkit.transforms import fuse_elementwise

        gm = fuse_elementwise(gm)
    if args.table:
        gm.graph.print_tabular(out)
    elif args.code:
        from rich.syntax import Syntax

        code = gm.print_readable(print_output=False)
        out.print(Syntax(code, "python", theme="ansi_dark").highlight(code), soft_wrap=True, end="")
    else:
        out.print(highlighted(gm.graph), soft_wrap=True)
    return 0
