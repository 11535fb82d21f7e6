"""``tpusim plan``: the best configuration of every algorithm and layout kind for a model on a chip count, ranked."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from tpusim.cli.common import announce_cost, count_arg, emit_json, note, print_table
from tpusim.cli.derive import add_request_arguments, request_from_args
from tpusim.cli.progress import Bar
from tpusim.config.requests import PlanRequest
from tpusim.units import GB, format_time

if TYPE_CHECKING:
    from tpusim.tuning.plan import PlanResult


def plan_arguments(p: argparse.ArgumentParser) -> None:
    add_request_arguments(p, PlanRequest)
    p.add_argument("--jobs", type=count_arg("--jobs"), default=1,
                   help="worker processes that simulate (at most one per CPU; the result is the same)")
    p.add_argument("--out", type=Path, metavar="FILE.csv", help="also write one CSV row per candidate here")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.runners import run_plan

    request = request_from_args(PlanRequest, args)
    assert isinstance(request, PlanRequest)
    announce_cost(request, args.context)
    with Bar("stage") as bar:
        result = run_plan(request, args.context, progress=bar.describe if bar.drawn else None, jobs=args.jobs)
    if args.out is not None:
        _write_csv(result, args.out)
    if args.json:
        emit_json(result.to_dict())
        return 0
    _print(result)
    for text in result.notes:
        note(text)
    return 0


def _write_csv(result: PlanResult, path: Path) -> None:
    import csv

    from tpusim.errors import OutputPathError
    from tpusim.tuning.plan import CSV_COLUMNS, csv_rows

    try:
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(CSV_COLUMNS))
            writer.writeheader()
            writer.writerows(csv_rows(result))
    except OSError as error:
        raise OutputPathError(f"--out {str(path)!r}: cannot write the CSV file ({error.strerror or error})") from None


def _print(result: PlanResult) -> None:
    print(f"{result.model} on {result.chips} chips ({result.hardware}), batch {result.batch}: "
          f"{len(result.candidates)} candidates, fastest first")
    # the slice each configuration is placed on, where there is one (a calibrated profile has none)
    placed = any(c.slice_shape is not None for c in result.candidates)
    rows: list[tuple[str, ...]] = [("", "algorithm", "layout", "configuration", *(("slice",) if placed else ()),
                                    "step time", "tokens/s", "MFU", "memory/chip", "recompute", "micro-batches",
                                    "bound")]
    for rank, c in enumerate(result.candidates, start=1):
        shape = (c.slice_shape or "-",) if placed else ()
        rows.append((str(rank), c.algorithm or "-", c.layout, c.named_layout, *shape, format_time(c.step_time_s),
                     f"{c.tokens_per_s:,.0f}", f"{c.mfu:.1%}", f"{c.memory_bytes_per_chip / GB:.2f} GB", c.recompute,
                     str(c.microbatches), c.bound))
    print_table(rows)


COMMANDS = MappingProxyType({"plan": plan_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
