"""``tpusim step``: one training step of a model on a mesh under an algorithm, with its breakdown."""

from __future__ import annotations

import argparse

from tpusim.cli.common import emit_json, network_text, note, stall_text
from tpusim.cli.derive import add_request_arguments, request_from_args
from tpusim.config.requests import StepRequest
from tpusim.experiments.runners import run_step
from tpusim.model.memory import microbatches_text
from tpusim.units import format_size, format_time


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("step", help="simulate one training step")
    add_request_arguments(p, StepRequest)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    request = request_from_args(StepRequest, args)
    assert isinstance(request, StepRequest)
    result = run_step(request, args.context)
    if args.json:
        emit_json(result.to_dict())
        return 0
    print(f"{result.model} on {result.chips} chips ({result.mesh}), {result.algorithm}, {result.hardware}, "
          f"batch {result.batch}, fidelity {result.fidelity}")
    print(f"  network       {network_text(result.mapping)}")
    print(f"  step time     {format_time(result.step_time_s)}   MFU {100 * result.mfu:.1f}%   "
          f"HFU {100 * result.hfu:.1f}%")
    print(f"  compute       {format_time(result.compute_s)}{stall_text(result.hbm_stall_s)}")
    print(f"  exposed comm  {format_time(result.exposed_comm_s)}")
    print(f"  idle          {format_time(result.idle_s)}")
    print(f"  dataflows     {', '.join(result.dataflows)}   slices {result.slices}")
    print(f"  memory        {format_size(result.memory_bytes_per_chip)} per chip of "
          f"{format_size(result.memory_capacity_bytes)}{'' if result.memory_feasible else '  (over capacity)'}, "
          f"recompute {result.recompute}, {microbatches_text(result.microbatches)}")
    print(f"  attention     {result.switches['attention']}")
    if not result.feasible:
        print("  infeasible    " + "; ".join(result.violations))
    for text in result.notes:
        note(text)
    return 0
