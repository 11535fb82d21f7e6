"""``tpusim step``: one training step of a model on a mesh under an algorithm, with its breakdown."""

from __future__ import annotations

import argparse

from tpusim.cli.common import UsageError, count_arg, emit_json, note
from tpusim.engine.fidelity import Fidelity
from tpusim.engine.network import resolve_mapping
from tpusim.engine.overrides import parse_slow_chips, parse_slow_links
from tpusim.gemm.algorithm import get_algorithm
from tpusim.gemm.dataflow import Dataflow
from tpusim.gemm.params import Prefetch, default_prefetch
from tpusim.hardware import load_hardware
from tpusim.model.layer import FF_LAYERS
from tpusim.model.memory import Recompute
from tpusim.model.registry import load_model
from tpusim.model.step import StepSpec, simulate_step
from tpusim.topology import parse_mesh
from tpusim.units import UnitError, format_size, format_time, parse_count


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
    p.add_argument("--bytes-per-param", type=float, default=16.0, help="weights+grads+optimizer (default 16)")
    p.add_argument("--ignore-memory", action="store_true", help="do not note memory over capacity")
    p.add_argument("--allow-infeasible", action="store_true",
                   help="time an infeasible point anyway (heads padded, nearest K below) and mark it")
    p.add_argument("--all-layers", action="store_true", help="simulate every layer instead of extrapolating")
    add_overrides(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _per_layer(text: str | None, flag: str, parse):  # type: ignore[no-untyped-def]
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) == 1:
        parts = parts * len(FF_LAYERS)
    if len(parts) != len(FF_LAYERS):
        raise UsageError(f"{flag} {text!r} needs 1 or {len(FF_LAYERS)} comma-separated values "
                         f"({', '.join(FF_LAYERS)})")
    return tuple(parse(p.strip()) for p in parts)


def _count(text: str) -> int:
    try:
        return parse_count(text, "--slices")
    except UnitError as error:
        raise UsageError(str(error)) from None


def _flag(text: str) -> bool:
    if text not in ("0", "1"):
        raise UsageError(f"--transposes value {text!r} must be 0 or 1")
    return text == "1"


def run(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    hardware = load_hardware(args.hardware)
    algorithm = get_algorithm(args.algorithm)
    rows, cols = parse_mesh(args.mesh)
    if rows * cols != args.chips:
        raise UsageError(f"--mesh {args.mesh!r} has {rows * cols} chips but --chips is {args.chips}")
    slices = _per_layer(args.slices, "--slices", _count)
    if slices is not None and not algorithm.uses_slices:
        raise UsageError(f"--slices {args.slices} does not apply to algorithm {algorithm.name!r}; "
                         "only 'meshslice' takes a slice count")
    dataflows = _per_layer(args.dataflows, "--dataflows", Dataflow.parse)
    transposes = _per_layer(args.transposes, "--transposes", _flag)
    mapping = resolve_mapping(hardware, rows, cols, topology=args.topology, axis_map=args.axis_map)
    slow_chips = parse_slow_chips(args.slow_chip, args.chips)
    slow_links = parse_slow_links(args.slow_link, mapping)
    prefetch = Prefetch(args.prefetch) if args.prefetch else default_prefetch(hardware)
    spec = StepSpec(model, algorithm.name, args.batch or args.chips, slices, dataflows, transposes, prefetch,
                    args.variant, Recompute(args.recompute), args.bytes_per_param,
                    allow_infeasible=args.allow_infeasible, extrapolate=not args.all_layers,
                    fidelity=Fidelity(args.fidelity))
    result = simulate_step(spec, hardware, mapping, chip_slowdown=slow_chips or None,
                           link_overrides=slow_links or None)
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
