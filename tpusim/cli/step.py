"""``tpusim step``: one training step of a model on a mesh under an algorithm, with its breakdown."""

from __future__ import annotations

import argparse

from tpusim.cli.common import UsageError, count_arg, emit_json, note, positive_number_arg
from tpusim.experiments import calls
from tpusim.units import format_size, format_time
from tpusim.vocabulary import Fidelity, Prefetch, Recompute


def add_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slow-chip", action="append", default=[], metavar="CHIPS:FACTOR",
                   help="chips that compute FACTOR times slower, e.g. '3,5:1.5' (repeatable)")
    p.add_argument("--slow-link", action="append", default=[], metavar="TARGET:FACTOR[:LAT]",
                   help="links FACTOR times slower to serialize (and LAT times the latency); TARGET is a link "
                        "id, SRC-DST, x/y/z or axis0/axis1 (repeatable)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("step", help="simulate one training step")
    p.add_argument("--model", required=True, help="see 'tpusim list models'")
    p.add_argument("--hardware", required=True, help="hardware profile name or YAML path")
    p.add_argument("--topology", help="physical network (default: the TPUv4 slice for the chip count)")
    p.add_argument("--chips", required=True, type=count_arg("--chips"))
    p.add_argument("--mesh", required=True, help="logical mesh RxC (Px1 for tp1d)")
    p.add_argument("--axis-map", help="logical axes onto physical ones, e.g. 'x*y,z'")
    p.add_argument("--algorithm", required=True, help="see 'tpusim list algorithms'")
    p.add_argument("--slices", help="MeshSlice K: one for all four FF layers, or K1,K2,K3,K4")
    p.add_argument("--dataflows", help="per FF layer (qkv,out_proj,ff1,ff2), e.g. os,ls,os,ls")
    p.add_argument("--transposes", help="per FF layer 0/1, e.g. 0,0,0,0")
    p.add_argument("--variant", help="algorithm variant")
    p.add_argument("--batch", type=count_arg("--batch"), help="global batch in sequences (default: chips)")
    p.add_argument("--prefetch", choices=[x.value for x in Prefetch])
    p.add_argument("--fidelity", choices=[f.value for f in Fidelity if f is not Fidelity.ANALYTIC], default="auto")
    p.add_argument("--recompute", choices=[r.value for r in Recompute], default="none")
    p.add_argument("--bytes-per-param", type=positive_number_arg("--bytes-per-param"), default=16.0,
                   help="weights+grads+optimizer (default 16)")
    p.add_argument("--ignore-memory", action="store_true", help="do not note memory over capacity")
    p.add_argument("--allow-infeasible", action="store_true",
                   help="time an infeasible point anyway (heads padded, nearest K below) and mark it")
    p.add_argument("--all-layers", action="store_true", help="simulate every layer instead of extrapolating")
    p.add_argument("--embedding", action="store_true", help="include the embedding and LM head (off by default)")
    p.add_argument("--optimizer", action="store_true", help="include the Adam update (off by default)")
    add_overrides(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _transpose_flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise UsageError(f"--transposes value {text!r} must be 0 or 1")
    return text == "1"


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [part.strip() for part in text.split(",")]


def run(args: argparse.Namespace) -> int:
    transposes = _split(args.transposes)
    result = calls.step(
        model=args.model, hardware=args.hardware, mesh=args.mesh, chips=args.chips, algorithm=args.algorithm,
        slices=args.slices, dataflows=args.dataflows,
        transposes=None if transposes is None else [_transpose_flag(t) for t in transposes],
        variant=args.variant, batch=args.batch, prefetch=args.prefetch, fidelity=args.fidelity,
        recompute=args.recompute, bytes_per_param=args.bytes_per_param, allow_infeasible=args.allow_infeasible,
        all_layers=args.all_layers, topology=args.topology, axis_map=args.axis_map, slow_chips=args.slow_chip,
        slow_links=args.slow_link, embedding=args.embedding, optimizer=args.optimizer,
        context=args.context,
    )
    if not result.memory_feasible and not args.ignore_memory:
        result.notes.append(f"memory over capacity by {format_size(result.memory_shortfall_bytes)} per chip; "
                            "consider --recompute selective|full")
    if args.json:
        emit_json(result.to_dict())
        return 0
    print(f"{result.model} on {result.chips} chips ({result.mesh}), {result.algorithm}, {result.hardware}, "
          f"batch {result.batch}, fidelity {result.fidelity}")
    print(f"  step time     {format_time(result.step_time_s)}   MFU {100 * result.mfu:.1f}%")
    print(f"  compute       {format_time(result.compute_s)}")
    print(f"  exposed comm  {format_time(result.exposed_comm_s)}")
    print(f"  idle          {format_time(result.idle_s)}")
    print(f"  dataflows     {', '.join(result.dataflows)}   slices {result.slices}")
    print(f"  memory        {format_size(result.memory_bytes_per_chip)} per chip of "
          f"{format_size(result.memory_capacity_bytes)}{'' if result.memory_feasible else '  (over capacity)'}")
    if not result.feasible:
        print("  infeasible    " + "; ".join(result.violations))
    for text in result.notes:
        note(text)
    return 0
