"""``fxkit launch -n N script.py [args]``: run a training script on N MPI ranks."""
import argparse

NAME = "launch"
HELP = "run a script on N MPI ranks (data parallel, pipeline, or both)"
DESCRIPTION = """\
Start SCRIPT on N processes with mpiexec (the mpich wheel's), as
`mpiexec -n N python SCRIPT` does, where fxkit.distributed.init_process_group("mpi")
joins them. A rank killed by a signal is named by its rank number, and the
other ranks stop at their next collective with an error naming it too."""
EXAMPLES = """\
examples:
  fxkit launch -n 4 recipes/train_ddp.py --epochs 2
  fxkit launch -n 4 recipes/pipeline_ddp.py"""


def configure(parser):
    parser.add_argument("-n", "--nproc", type=int, required=True, metavar="N", help="the number of ranks")
    parser.add_argument("script", metavar="SCRIPT", help="the Python script every rank runs")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed on to SCRIPT")


def run(args, out, err):
    from fxkit.distributed.launch import launch

    return launch(args.nproc, args.script, args.args)
