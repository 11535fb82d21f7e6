"""``tpusim gemm``: one distributed GeMM under a chosen algorithm and dataflow, timed, optionally verified."""

from __future__ import annotations

import argparse
from types import MappingProxyType

from tpusim.cli.common import add_trace_arguments, announce_cost, emit_json, network_text, note, stall_text
from tpusim.cli.derive import add_request_arguments, request_from_args
from tpusim.cli.link_map import add_link_map_argument, finish_link_map, start_link_map
from tpusim.config.requests import GemmRequest
from tpusim.units import format_time


def gemm_arguments(p: argparse.ArgumentParser) -> None:
    add_request_arguments(p, GemmRequest)
    add_trace_arguments(p, "write a Chrome/Perfetto trace JSON here", chips_default="default all")
    add_link_map_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.runners import run_gemm
    from tpusim.experiments.tracing import finish_trace, start_trace

    request = request_from_args(GemmRequest, args)
    assert isinstance(request, GemmRequest)
    announce_cost(request, args.context)
    tracer = start_trace(args.trace, args.trace_chips)
    link_busy = start_link_map(args.link_map, request.fidelity)
    result = run_gemm(request, args.context, tracer, link_busy)
    finish_trace(tracer, args.trace, result)
    finish_link_map(link_busy, args.link_map, result.time_s,
                    f"{result.algorithm} {result.dataflow} GeMM M={result.m} N={result.n} K={result.k} on a "
                    f"{result.mesh} mesh, {result.mapping['topology']}, fidelity {result.fidelity}", result.notes)
    if args.json:
        emit_json(result.to_dict())
        return 0
    twin = "n/a" if result.analytic_time_s is None else format_time(result.analytic_time_s)
    sliced = "" if result.slices is None else f", slice count {result.slices}"
    print(f"{result.algorithm} {result.dataflow}{' (transposed)' if result.transpose else ''} "
          f"M={result.m} N={result.n} K={result.k} on {result.mesh}{sliced}, {result.hardware}, "
          f"prefetch {result.prefetch}")
    print(f"  network         {network_text(result.mapping, result.multi_axis)}")
    print(f"  time            {format_time(result.time_s)}   (closed form {twin})")
    print(f"  compute         {format_time(result.compute_s)}{stall_text(result.hbm_stall_s)}")
    print(f"  exposed comm    {format_time(result.exposed_comm_s)}")
    print(f"  idle            {format_time(result.idle_s)}")
    print(f"  FLOP per chip   {result.flops_per_chip:.6g}")
    if result.max_abs_error is not None:
        print(f"  max abs error   {result.max_abs_error:.3g} (vs the dense product)")
    for text in result.notes:
        note(text)
    return 0


COMMANDS = MappingProxyType({"gemm": gemm_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
