"""``fxkit split MODEL --stages K``: balanced pipeline stages and their table."""
NAME = "split"
HELP = "split into balanced pipeline stages and print the stage table"
DESCRIPTION = """\
Cut MODEL into K pipeline stages with split_pipeline: cuts go where few
tensors cross (between residual blocks, not inside them) and an exact search
minimises the largest stage's cost (FLOPs, parameter bytes, or time measured
by running each node). With fxkit.pipe_split() markers in forward the stages
end at the markers and --stages may be left out. Prints one row per stage:
its nodes, FLOPs, parameter bytes and the bytes it sends to the next."""
EXAMPLES = """\
examples:
  fxkit split resnet50 --stages 4
  fxkit split resnet50 --stages 4 --balance params --input 8,3,224,224
  fxkit split transformer_block --stages 2 --balance time"""


def configure(parser):
    from fxkit.cli.parser import positive_int

    parser.add_argument("--stages", type=positive_int, metavar="K",
                        help="the number of stages (optional with pipe_split() markers)")
    parser.add_argument("--balance", choices=("flops", "params", "time"), default="flops",
                        help="what to balance: FLOPs, parameter bytes, or measured time (default: flops)")


def run(args, out, err):
    from fxkit.cli.model_spec import concrete, input_specs, load_model, require_inputs, trace
    from fxkit.transforms.split_pipeline import split_pipeline

    with err.status(f"building {args.model}"):
        loaded = load_model(args.model, args.dtype)
    specs = concrete(require_inputs(loaded, input_specs(loaded, args.input, args.dtype), NAME), NAME)
    gm = trace(loaded, specs, err, shapes=False)  # the split's cost model infers them
    split_pipeline(gm, specs, n_stages=args.stages, balance=args.balance, console=out)
    return 0
