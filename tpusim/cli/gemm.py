"""``tpusim gemm``: one distributed GeMM under a chosen algorithm and dataflow, timed, optionally verified."""

from __future__ import annotations

import argparse
from pathlib import Path

from tpusim.cli.common import UsageError, count_arg, emit_json, note
from tpusim.experiments import calls
from tpusim.units import format_time
from tpusim.vocabulary import Dataflow, Fidelity, Prefetch


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gemm", help="simulate one distributed GeMM")
    p.add_argument("--hardware", required=True, help="hardware profile name or YAML path")
    p.add_argument("--topology", help="physical network: TPUv4 slice AxBxC, torus:AxB[xC] or mesh:AxB[xC]")
    p.add_argument("--mesh", required=True, help="logical mesh RxC (Px1 for tp1d)")
    p.add_argument("--axis-map", help="logical axes onto physical ones, e.g. 'x*y,z'")
    p.add_argument("--algorithm", required=True, help="see 'tpusim list algorithms'")
    p.add_argument("--dataflow", required=True, choices=[d.value for d in Dataflow],
                   help="os: Y = X W; ls: Y = X W^T (W is [N,K]); rs: Y = X^T W (X is [K,M])")
    p.add_argument("--m", required=True, type=count_arg("--m"), help="output rows M")
    p.add_argument("--n", required=True, type=count_arg("--n"), help="output columns N")
    p.add_argument("--k", required=True, type=count_arg("--k"), help="contraction dimension K")
    p.add_argument("--slices", type=count_arg("--slices"), help="MeshSlice slice count K")
    p.add_argument("--block", type=count_arg("--block"), default=8, help="MeshSlice strided run length")
    p.add_argument("--variant", help="algorithm variant (cannon: textbook, bidirectional-halves)")
    p.add_argument("--prefetch", choices=[x.value for x in Prefetch],
                   help="data-independent gathers (default: ideal on calibrated, previous-op on physical)")
    p.add_argument("--transpose", action="store_true", help="swap the roles of the two mesh axes")
    p.add_argument("--dtype", default="bf16", help="element type being timed (default bf16)")
    p.add_argument("--compat-mean-overlap", action="store_true",
                   help="twin only: the authors' simulation-branch (a+b)/2 rule (labelled in results)")
    p.add_argument("--fidelity", choices=[f.value for f in Fidelity], default="full")
    p.add_argument("--trace", type=Path, help="write a Chrome/Perfetto trace JSON here")
    p.add_argument("--trace-chips", help="chips to trace, e.g. '0,3,5-7' (default all)")
    p.add_argument("--verify", action="store_true", help="run real float64 data and report max_abs_error")
    p.add_argument("--seed", type=int, default=0, help="seed of the --verify operands")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.trace is None and args.trace_chips:
        raise UsageError("--trace-chips needs --trace FILE")
    result = calls.gemm(
        hardware=args.hardware, mesh=args.mesh, algorithm=args.algorithm, dataflow=args.dataflow, m=args.m,
        n=args.n, k=args.k, topology=args.topology, axis_map=args.axis_map, slices=args.slices,
        block=args.block, variant=args.variant, prefetch=args.prefetch, transpose=args.transpose,
        dtype=args.dtype, compat_mean_overlap=args.compat_mean_overlap, fidelity=args.fidelity,
        verify=args.verify, seed=args.seed, trace=args.trace, trace_chips=args.trace_chips,
        context=args.context,
    )
    if args.json:
        emit_json(result.to_dict())
        return 0
    twin = "n/a" if result.analytic_time_s is None else format_time(result.analytic_time_s)
    print(f"{result.algorithm} {result.dataflow}{' (transposed)' if result.transpose else ''} "
          f"M={result.m} N={result.n} K={result.k} on {result.mesh}, {result.hardware}, prefetch {result.prefetch}")
    print(f"  time            {format_time(result.time_s)}   (closed form {twin})")
    print(f"  compute         {format_time(result.compute_s)}")
    print(f"  exposed comm    {format_time(result.exposed_comm_s)}")
    print(f"  idle            {format_time(result.idle_s)}")
    print(f"  FLOP per chip   {result.flops_per_chip:.6g}")
    if result.max_abs_error is not None:
        print(f"  max abs error   {result.max_abs_error:.3g} (vs the dense product)")
    for text in result.notes:
        note(text)
    return 0
