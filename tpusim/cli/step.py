"""``tpusim step``: one training step of a model on a mesh under an algorithm, with its breakdown."""

from __future__ import annotations

import argparse
from types import MappingProxyType

from tpusim.cli.common import (
    add_trace_arguments,
    announce_cost,
    emit_json,
    network_text,
    note,
    slices_text,
    stall_text,
    throughput_text,
)
from tpusim.cli.derive import add_request_arguments, request_from_args
from tpusim.cli.link_map import add_link_map_argument, finish_link_map, start_link_map
from tpusim.cli.progress import Bar
from tpusim.config.requests import StepRequest
from tpusim.units import format_size, format_time

BAR_DELAY_S = 1.0
"""A step still running after this many seconds gets a progress bar; a quicker one prints none."""


def step_arguments(p: argparse.ArgumentParser) -> None:
    add_request_arguments(p, StepRequest)
    add_link_map_argument(p)
    add_trace_arguments(p, "write a Chrome/Perfetto trace JSON of the simulated layers here")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.runners import run_step
    from tpusim.experiments.tracing import finish_trace, start_trace
    from tpusim.model.memory import microbatches_text

    request = request_from_args(StepRequest, args)
    assert isinstance(request, StepRequest)
    announce_cost(request, args.context)
    tracer = start_trace(args.trace, args.trace_chips)
    link_busy = start_link_map(args.link_map, request.fidelity)
    # a bar on a terminal's standard error for a step that takes a while (slice counts chosen, then the step)
    with Bar("piece", delay_s=BAR_DELAY_S) as bar:
        result = run_step(request, args.context, link_busy=link_busy, tracer=tracer,
                          progress=bar.phase if bar.drawn else None)
    chrome = finish_trace(tracer, args.trace, result)
    finish_link_map(link_busy, args.link_map, result.step_time_s,
                    f"{result.model} training step, {result.algorithm} on a {result.layout} "
                    f"{'layout' if result.data_parallel > 1 else 'mesh'}, "
                    f"{result.mapping['topology']}, fidelity {result.fidelity}", result.notes)
    if args.json:
        fields = result.to_dict()
        if chrome is not None:  # the summary `tpusim summarize` gives of the file just written
            from tpusim.experiments.trace_summary import summarize_trace

            fields["summary"] = summarize_trace(chrome, shown=str(args.trace))
        emit_json(fields)
        return 0
    layout = (f"{result.data_parallel} data-parallel replicas of {result.mesh}, ZeRO {result.zero_stage}"
              if result.data_parallel > 1 else result.mesh)
    print(f"{result.model} on {result.chips} chips ({layout}), {result.algorithm}, {result.hardware}, "
          f"batch {result.batch}, fidelity {result.fidelity}")
    print(f"  network       {network_text(result.mapping, result.multi_axis)}")
    print(f"  step time     {format_time(result.step_time_s)}   MFU {100 * result.mfu:.1f}%   "
          f"HFU {100 * result.hfu:.1f}%")
    print(f"  throughput    {throughput_text(result.tokens_per_s, result.seconds_per_sequence)}")
    print(f"  compute       {format_time(result.compute_s)}{stall_text(result.hbm_stall_s)}")
    data = (f"   (tensor-parallel {format_time(result.exposed_comm_s - result.exposed_data_comm_s)}, data-parallel "
            f"{format_time(result.exposed_data_comm_s)})" if result.data_parallel > 1 else "")
    print(f"  exposed comm  {format_time(result.exposed_comm_s)}{data}")
    print(f"  idle          {format_time(result.idle_s)}")
    print(f"  dataflows     {', '.join(result.dataflows)}   {slices_text(result.slices)}")
    print(f"  memory        {format_size(result.memory_bytes_per_chip)} per chip of "
          f"{format_size(result.memory_capacity_bytes)}{'' if result.memory_feasible else '  (over capacity)'}, "
          f"recompute {result.recompute}, {microbatches_text(result.microbatches)}")
    print(f"  attention     {result.switches['attention']}")
    if "host_wait_s" in result.switches:  # activations offloaded over the host link
        moved = result.switches["host_transfer_s"]
        print(f"  host link     {format_time(moved['to_host'])} out, {format_time(moved['from_host'])} back, "
              f"{format_time(result.switches['host_wait_s'])} waited ({', '.join(result.switches['remat_offload'])})")
    if not result.feasible:
        print("  infeasible    " + "; ".join(result.violations))
    for text in result.notes:
        note(text)
    return 0


COMMANDS = MappingProxyType({"step": step_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
