"""``tpusim reproduce`` (the paper-reproduction families) and ``tpusim validate`` (reference numbers)."""

from __future__ import annotations

import argparse
import os
import sys
from types import MappingProxyType

from tpusim.cli.common import count_arg, emit_json, out_dir_arg
from tpusim.cli.progress import Bar
from tpusim.errors import ValidationFailed
from tpusim.experiments.families import family_names


def reproduce_arguments(p: argparse.ArgumentParser) -> None:
    families = [*family_names(), "all"]
    # the name is checked by reproduce() (families.get_family), before any work
    p.add_argument("family", metavar="FAMILY", help=f"one of: {', '.join(families)}")
    p.add_argument("--out", type=out_dir_arg, required=True, help="output folder; family X goes to OUT/X/")
    p.add_argument("--quick", action="store_true", help="pruned tuner instead of exhaustive search")
    p.add_argument("--hardware", help="run every point on this profile instead of the family's")
    p.add_argument("--jobs", type=count_arg("--jobs"), default=os.cpu_count() or 1,
                   help="parallel worker processes (default: one per CPU)")
    p.add_argument("--redraw", action="store_true",
                   help="simulate nothing: redraw OUT/X/X.csv and X.png from the results.json of an earlier run")
    p.add_argument("--lead-ranges", action="store_true",
                   help="headline and pod: run every point under each sensitivity setting too (about 17 times "
                        "the points on tpuv4), so that each lead has its range over them")
    p.add_argument("--resume", action="store_true",
                   help="keep the finished points of an interrupted run in OUT/X/ and run the rest")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def validate_arguments(v: argparse.ArgumentParser) -> None:
    v.add_argument("--json", action="store_true", help="one JSON object on stdout")
    v.add_argument("--measurements", metavar="FILE.csv",
                   help="only the measured training runs of this CSV file (the columns of the shipped table, "
                        "docs/validation.md#measured-training-runs), each simulated; informational, never exit 3")
    v.set_defaults(handler=validate)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.reproduce import headline_table, reproduce

    with Bar("point") as bar:
        outputs = reproduce(args.family, args.out, quick=args.quick, hardware=args.hardware, jobs=args.jobs,
                            cache=args.context.cache_folder, redraw=args.redraw, lead_ranges=args.lead_ranges,
                            progress=bar.phase if bar.drawn else None, resume=args.resume, estimate=bar.say)
    if args.json:
        emit_json({"families": [{"name": o.name, "csv": str(o.csv), "png": str(o.png), "rows": o.rows}
                                for o in outputs]})
        return 0
    for output in outputs:
        print(f"{output.name}: {output.csv} and {output.png} ({len(output.rows)} rows)")
        if output.name == "headline":
            print(headline_table(output.rows))
    return 0


def validate(args: argparse.Namespace) -> int:
    from tpusim.config.loader import display_path
    from tpusim.experiments.measurements.compare import compare_measurements, comparison_text, measurements_payload
    from tpusim.experiments.measurements.table import SHIPPED_TABLE, SHIPPED_TABLE_NAME
    from tpusim.experiments.validation import run_validation

    table = args.measurements if args.measurements is not None else SHIPPED_TABLE
    # the table is read (and a bad file refused) before anything is simulated
    measured = compare_measurements(table, args.context)
    shown = display_path(table) if args.measurements is not None else SHIPPED_TABLE_NAME
    if args.measurements is not None:
        if args.json:
            emit_json(measurements_payload(measured, shown))
        else:
            print(comparison_text(measured, shown))
        return 0
    # the measured runs have no tolerance yet: they are reported, and never count as a failed check
    results = run_validation()
    failed = [c for c in results if not c.ok]
    if args.json:
        emit_json({"checks": [c.to_dict() for c in results], "failed": len(failed),
                   "measured_runs": measurements_payload(measured, shown)})
    else:
        width = max(len(c.quantity) for c in results)
        print(f"{'quantity':<{width}}  {'reference':>12}  {'simulated':>12}  {'delta':>10}  {'tolerance':>9}")
        for c in results:
            flag = "" if c.within else f"  explained: {c.explained}" if c.ok else "  MISS"
            print(f"{c.quantity:<{width}}  {c.reference:>12.4f}  {c.simulated:>12.4f}  {100 * c.delta:>+9.4f}%"
                  f"  {100 * c.tolerance:>8.4f}%{flag}")
        for group in dict.fromkeys(c.group for c in results):
            rows = [c for c in results if c.group == group]
            deltas = [abs(c.delta) for c in rows]
            print(f"{group}: {len(rows)} checks, mean |delta| {100 * sum(deltas) / len(deltas):.5f}%, "
                  f"max |delta| {100 * max(deltas):.5f}%, {sum(not c.within for c in rows)} over tolerance "
                  f"({sum(not c.ok for c in rows)} unexplained; times in us)")
        print()
        print(comparison_text(measured, shown))
    if failed:
        raise ValidationFailed(f"{len(failed)} validation check(s) exceeded their tolerance: "
                               + "; ".join(c.quantity for c in failed[:3]))
    sys.stdout.flush()
    return 0


COMMANDS = MappingProxyType({"reproduce": reproduce_arguments, "validate": validate_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
