"""``tpusim tune``: the best mesh shape, per-layer dataflow, transposition and slice count for a step."""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import TYPE_CHECKING

from tpusim.cli.common import (
    add_trace_arguments,
    announce_cost,
    count_arg,
    emit_json,
    note,
    per_layer_text,
    print_table,
)
from tpusim.cli.derive import add_request_arguments, request_from_args
from tpusim.cli.progress import Bar
from tpusim.config.requests import TuneRequest
from tpusim.units import format_time

if TYPE_CHECKING:
    from tpusim.tuning import Choice, TuneResult


def tune_arguments(p: argparse.ArgumentParser) -> None:
    add_request_arguments(p, TuneRequest)
    add_trace_arguments(p, "simulate the best choice once more as a step and write its Chrome/Perfetto trace JSON "
                        "here", flag="--trace-best")
    p.add_argument("--jobs", type=count_arg("--jobs"), default=1,
                   help="worker processes that simulate (at most one per CPU; the result is the same)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.runners import run_tune
    from tpusim.experiments.tracing import finish_trace, start_trace

    request = request_from_args(TuneRequest, args)
    assert isinstance(request, TuneRequest)
    announce_cost(request, args.context)
    tracer = start_trace(args.trace_best, args.trace_chips, "--trace-best")
    # where a long search is: a bar on a terminal's standard error, its stages counted (stdout keeps the result)
    with Bar("stage") as bar:
        progress = bar.describe if bar.drawn else None
        result = run_tune(request, args.context, progress=progress, tracer=tracer, stages=bar.update,
                          jobs=args.jobs)
    finish_trace(tracer, args.trace_best, result)
    if args.json:
        emit_json(result.to_dict())
        return 0
    _print(result)
    for text in result.notes:
        note(text)
    return 0


def _print(result: TuneResult) -> None:
    from tpusim.model.memory import microbatches_text

    mode = "exhaustive" if result.exhaustive else "pruned"
    across = f" in {result.dcn_data} slices over DCN, meshes per slice" if result.dcn_data > 1 else ""
    print(f"{result.model} on {result.chips} chips{across} ({result.hardware}), {result.algorithm}, "
          f"batch {result.batch}, "
          f"prefetch {result.prefetch}, recompute {result.recompute}, attention {result.attention}, "
          f"{microbatches_text(result.microbatches)}; {mode} search")
    # the slice each mesh is placed on, where there is one (a calibrated profile has none)
    placed = result.best.slice_shape is not None
    rows: list[tuple[str, ...]] = [("", "mesh", *(("slice",) if placed else ()), "dataflows", "transposed", "slices",
                                    "step time", "tokens/s", "per sequence", "MFU", "HFU")]
    for label, choice in (("best", result.best), ("runner-up", result.runner_up)):
        if choice is not None:
            rows.append(_row(label, choice, placed))
    print_table(rows)
    skipped = sum(1 for m in result.meshes if m.status == "skipped")
    simulated = sum(1 for m in result.meshes if m.status == "simulated")
    shapes = len({m.slice_shape for m in result.meshes})
    across = f" on {shapes} slice shapes" if shapes > 1 else ""
    print(f"meshes: {len(result.meshes)} factorisations{across}, {skipped} skipped, {simulated} simulated; "
          f"candidates: {result.evaluated} priced, {result.simulated} by simulation; "
          f"{result.steps_simulated} whole step{'s' if result.steps_simulated != 1 else ''} simulated; "
          f"{result.search_space} configurations covered")


def _row(label: str, choice: Choice, placed: bool) -> tuple[str, ...]:
    transposed = " ".join("T" if t else "-" for t in choice.transposes)
    shape = (choice.slice_shape or "-",) if placed else ()
    return (label, choice.mesh, *shape, " ".join(choice.dataflows), transposed, per_layer_text(choice.slices),
            format_time(choice.step_time_s), f"{choice.tokens_per_s:,.0f}", format_time(choice.seconds_per_sequence),
            f"{choice.mfu:.1%}", f"{choice.hfu:.1%}")


COMMANDS = MappingProxyType({"tune": tune_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
