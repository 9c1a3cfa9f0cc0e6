"""``fxkit summary MODEL``: per-layer shapes, parameters, FLOPs and bytes, with totals."""
NAME = "summary"
HELP = "print per-layer shapes, parameters, FLOPs and bytes, with totals"
DESCRIPTION = """\
Trace MODEL, infer every node's shape from the op registry's rules (nothing
runs, no activation memory is allocated) and print the cost model's table: per
node its target, output type, FLOPs, parameters and bytes read and written,
then the totals and the MAC count. A name in --input (N,3,224,224) gives
costs as formulas of N. --partition BACKEND summarises the graph a delegate
backend (onnxruntime) lowers: one row per partition it runs, and the nodes
left between them."""
EXAMPLES = """\
examples:
  fxkit summary resnet50 --input 1,3,224,224
  fxkit summary resnet50 --input N,3,224,224
  fxkit summary lstm_cell
  fxkit summary pkg.models:build_net --input 8,3,32,32
  fxkit summary mlp --partition onnxruntime"""


def configure(parser):
    parser.add_argument("--partition", metavar="BACKEND",
                        help="summarise the partitions a delegate backend (onnxruntime) runs, one row each")


def run(args, out, err):
    from fxkit.cli.model_spec import input_specs, load_model, require_inputs, trace
    from fxkit.transforms.cost import summary

    with err.status(f"building {args.model}"):
        loaded = load_model(args.model, args.dtype)
    specs = require_inputs(loaded, input_specs(loaded, args.input, args.dtype), NAME)
    gm = trace(loaded, specs, err, shapes=False)  # the cost model infers them
    if args.partition is not None:
        from fxkit.cli.commands.draw import partitioned
        from fxkit.cli.model_spec import concrete

        specs = concrete(specs, NAME)
        gm = partitioned(loaded, specs, args.partition, err)
    summary(gm, *specs, console=out)
    return 0
