"""``tpusim tune``: the best mesh shape, per-layer dataflow, transposition and slice count for a step."""

from __future__ import annotations

import argparse

from tpusim.cli.common import UsageError, count_arg, emit_json, note
from tpusim.hardware import load_hardware
from tpusim.model.registry import load_model
from tpusim.tuning import Choice, TuneRequest, TuneResult, tune
from tpusim.units import format_time
from tpusim.vocabulary import Dataflow, Fidelity, Prefetch, Recompute


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="search mesh shape, dataflows, transposition and slice counts")
    p.add_argument("--model", required=True, help="model name (see 'tpusim list models') or YAML path")
    p.add_argument("--hardware", required=True, help="hardware profile name or YAML path")
    p.add_argument("--chips", required=True, type=count_arg("--chips"), help="chip count P; meshes R x C = P")
    p.add_argument("--algorithm", default="meshslice", help="see 'tpusim list algorithms' (default meshslice)")
    p.add_argument("--batch", type=count_arg("--batch"), help="global batch in sequences (default: the chip count)")
    p.add_argument("--topology", help="physical network (default: the TPUv4 slice for the chip count)")
    p.add_argument("--prefetch", choices=[x.value for x in Prefetch],
                   help="data-independent gathers (default: ideal on calibrated, previous-op on physical)")
    p.add_argument("--recompute", choices=[r.value for r in Recompute], default="none",
                   help="activation recomputation (default none)")
    p.add_argument("--fidelity", choices=[Fidelity.AUTO.value, Fidelity.SYMMETRIC.value, Fidelity.FULL.value],
                   default="auto", help="of every simulation (default auto: symmetric where exact, else full)")
    p.add_argument("--dataflows", default="os,ls,rs",
                   help="comma-separated dataflows each FF layer may use (default os,ls,rs)")
    p.add_argument("--exhaustive", action="store_true",
                   help="simulate every feasible candidate instead of pruning with the closed forms")
    p.add_argument("--refine-meshes", type=count_arg("--refine-meshes"), default=3,
                   help="meshes whose candidates are simulated after analytic ranking (default 3)")
    p.add_argument("--ignore-memory", action="store_true", help="consider configurations that overflow HBM")
    p.add_argument("--allow-infeasible", action="store_true",
                   help="also consider meshes that break the head or batch rules (heads padded)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _dataflows(text: str) -> tuple[Dataflow, ...]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise UsageError(f"--dataflows {text!r} names no dataflow; valid: os, ls, rs (comma-separated)")
    chosen = tuple(dict.fromkeys(Dataflow.parse(name) for name in names))
    return chosen


def run(args: argparse.Namespace) -> int:
    request = TuneRequest(
        model=load_model(args.model), hardware=load_hardware(args.hardware), chips=args.chips,
        algorithm=args.algorithm, batch=args.batch, topology=args.topology,
        prefetch=Prefetch(args.prefetch) if args.prefetch else None, recompute=Recompute(args.recompute),
        fidelity=Fidelity(args.fidelity), exhaustive=args.exhaustive, ignore_memory=args.ignore_memory,
        allow_infeasible=args.allow_infeasible, refine_meshes=args.refine_meshes,
        dataflows=_dataflows(args.dataflows),
    )
    result = tune(request, context=args.context)
    if args.json:
        emit_json(result.to_dict())
        return 0
    _print(result)
    for text in result.notes:
        note(text)
    return 0


def _print(result: TuneResult) -> None:
    mode = "exhaustive" if result.exhaustive else "pruned"
    print(f"{result.model} on {result.chips} chips ({result.hardware}), {result.algorithm}, batch {result.batch}, "
          f"prefetch {result.prefetch}, recompute {result.recompute}; {mode} search")
    rows = [("", "mesh", "dataflows", "transposed", "slices", "step time", "MFU")]
    for label, choice in (("best", result.best), ("runner-up", result.runner_up)):
        if choice is not None:
            rows.append(_row(label, choice))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    skipped = sum(1 for m in result.meshes if m.status == "skipped")
    simulated = sum(1 for m in result.meshes if m.status == "simulated")
    print(f"meshes: {len(result.meshes)} factorisations, {skipped} skipped, {simulated} simulated; "
          f"candidates: {result.evaluated} priced, {result.simulated} by simulation; "
          f"{result.steps_simulated} whole steps simulated; {result.search_space} configurations covered")


def _row(label: str, choice: Choice) -> tuple[str, ...]:
    transposed = " ".join("T" if t else "-" for t in choice.transposes)
    slices = " ".join("-" if k is None else str(k) for k in choice.slices)
    return (label, choice.mesh, " ".join(choice.dataflows), transposed, slices, format_time(choice.step_time_s),
            f"{choice.mfu:.1%}")
