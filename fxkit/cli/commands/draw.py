"""``fxkit draw MODEL -o model.svg``: a picture of the graph (DOT, SVG, PNG, PDF)."""
NAME = "draw"
HELP = "draw the graph to .svg/.png/.pdf (Graphviz's dot) or .dot (no dependency)"
DESCRIPTION = """\
Trace MODEL and draw its graph: nodes coloured by opcode (inputs green,
attributes yellow, op calls blue, module calls purple, output red), shapes on
the edges when input shapes are known, fused groups (--fuse) and pipeline
stages (--stages) as boxes around their nodes; --partition BACKEND draws
the graph a delegate backend (onnxruntime) lowers, each partition it runs
as a box. The suffix of -o picks the
format: .dot is written directly; .svg, .png and .pdf are rendered by the
Graphviz `dot` program (Debian/Ubuntu: apt-get install graphviz; no pip
package provides it); without it the .dot file is written instead, with a
note saying so, and the command succeeds."""
EXAMPLES = """\
examples:
  fxkit draw lenet -o lenet.svg
  fxkit draw lstm_cell --fuse -o lstm.png
  fxkit draw resnet18 --stages 2 -o resnet18.pdf
  fxkit draw mlp -o mlp.dot
  fxkit draw transformer_block --partition onnxruntime -o block.dot"""


def configure(parser):
    from fxkit.cli.parser import positive_int

    parser.add_argument("-o", "--output", metavar="PATH", required=True,
                        help="the file to write: .svg, .png, .pdf (rendered by dot) or .dot")
    parser.add_argument("--fuse", action="store_true", help="fuse elementwise ops first; groups are drawn as boxes")
    parser.add_argument("--stages", type=positive_int, metavar="K",
                        help="split into K balanced pipeline stages and draw each as a box")
    parser.add_argument("--partition", metavar="BACKEND",
                        help="compile with this delegate backend (onnxruntime) and draw its partitions as boxes")
    parser.add_argument("--balance", choices=("flops", "params", "time"), default="flops",
                        help="what --stages balances (default: flops)")


def run(args, out, err):
    import pathlib

    from fxkit.cli.model_spec import concrete, input_specs, load_model, require_inputs, trace
    from fxkit.errors import MissingToolError
    from fxkit.graph.draw import draw

    with err.status(f"building {args.model}"):
        loaded = load_model(args.model, args.dtype)
    specs = input_specs(loaded, args.input, args.dtype)
    if args.stages is not None or args.partition is not None:
        specs = concrete(require_inputs(loaded, specs, NAME), NAME)
    gm = trace(loaded, specs, err)
    if args.partition is not None:
        gm = partitioned(loaded, specs, args.partition, err)
    if args.stages is not None:
        from fxkit.transforms.split_pipeline import split_pipeline

        with err.status(f"splitting into {args.stages} stages"):
            parent = split_pipeline(gm, specs, n_stages=args.stages, balance=args.balance, verbose=False)
        mark_stages(gm, parent)
    if args.fuse:
        from fxkit.transforms import fuse_elementwise

        gm = fuse_elementwise(gm)
    try:
        with err.status(f"drawing {args.output}"):
            path = draw(gm, args.output)
    except MissingToolError as exc:
        # NOTE: draw wrote the DOT text next to the picture; that is a result, not a failure
        path = pathlib.Path(args.output).with_suffix(".dot")
        err.print(f"[yellow]note:[/] {exc}", markup=True, highlight=False)
    out.print(f"wrote {path} ({len(gm.graph.nodes)} nodes)", markup=False)
    return 0


def partitioned(loaded, specs, backend, err):
    """The graph module ``backend`` lowers for ``specs``: a delegate's partitions are its children."""
    import fxkit

    with err.status(f"compiling {loaded.name} with the {backend} backend"):
        return fxkit.compile(loaded.model, backend=backend, example_inputs=specs).graph_module


def mark_stages(gm, parent):
    """Set ``meta["stage"]`` on ``gm``'s nodes from a `split_pipeline` result of it.

    The split keeps node names: each stage child holds the call and get_attr
    nodes of its stage under their original names (its placeholders are the
    values it receives from earlier stages).
    """
    stage_of = {}
    children = [n.target for n in parent.graph.nodes if n.op == "call" and type(n.target) is str]
    for index, child_name in enumerate(children):
        for node in parent.get_submodule(child_name).graph.nodes:
            if node.op in ("call", "get_attr"):
                stage_of[node.name] = index
    for node in gm.graph.nodes:
        if node.name in stage_of:
            node.meta["stage"] = stage_of[node.name]
