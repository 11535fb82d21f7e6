"""``tpusim summarize``: a trace file's summary for one traced chip, as tables or one JSON object.

The figures are ``tpusim.experiments.trace_summary``'s (defined in docs/results.md#trace-summaries); this module
parses the flags and prints them in human units.
"""

from __future__ import annotations

import argparse
from types import MappingProxyType
from typing import Any

from tpusim.cli.common import UsageError, emit_json, print_table
from tpusim.units import format_time

LONGEST_RUNS = 10
"""How many runs of the critical path the text lists (the longest; ``--json`` has them all)."""


def summarize_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", metavar="TRACE.json", help="a trace written by --trace or --trace-best")
    p.add_argument("--chip", type=_chip_id, metavar="N",
                   help="the traced chip to summarize (default: the critical chip if traced, else the lowest traced)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def _chip_id(text: str) -> int:
    if not text.strip().isdigit():
        raise UsageError(f"--chip {text!r} must be a chip id, a whole number >= 0")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.trace_summary import summarize_file

    summary = summarize_file(args.trace, args.chip)
    if args.json:
        emit_json(summary)
    else:
        print_summary(summary)
    return 0


def print_summary(summary: dict[str, Any]) -> None:
    """The summary as text: the chip's breakdown, then the tables by collective, layer and op, then its critical
    path."""
    from tpusim.experiments.trace_spans import OTHER

    about = summary["trace"]
    step = {"model", "algorithm", "mesh", "hardware", "fidelity"} <= about.keys()
    if step:  # a GeMM trace says nothing of itself
        print(f"trace of {about['model']}, {about['algorithm']} on {about['mesh']} ({about['hardware']}, fidelity "
              f"{about['fidelity']})")
    if "traced_layers" in about:
        print(f"  layers        {about['traced_layers']}")
    print(f"  chip          {summary['chip_name']}: {summary['chip_rule']}")
    print(f"  end time      {format_time(summary['end_s'])} = compute {format_time(summary['compute_s'])} + exposed "
          f"comm {format_time(summary['exposed_comm_s'])} + idle {format_time(summary['idle_s'])}")
    print(f"  HBM stall     {format_time(summary['hbm_stall_s'])} of the compute")
    print(f"  collectives   {format_time(summary['comm_s'])} in flight: {format_time(summary['hidden_s'])} hidden "
          f"by compute, {format_time(summary['exposed_s'])} exposed; overlap efficiency "
          f"{_percent(summary['overlap_efficiency'])}")
    print()
    _comm_table("collective", "op", summary["collectives"], with_compute=False)
    for title, column, rows in (("layer", "layer", summary["layers"]), ("op", "op", summary["ops"])):
        if [row[column] for row in rows] != [OTHER]:  # a trace whose names say no layer (a GeMM's) has no table
            print()
            _comm_table(title, column, rows, with_compute=True)
    print()
    _print_path(summary["critical_path"])


def _comm_table(title: str, column: str, rows: list[dict[str, Any]], *, with_compute: bool) -> None:
    first = ("compute",) if with_compute else ("count",)
    last = ("HBM stall",) if with_compute else ()
    table: list[tuple[str, ...]] = [(title, *first, "in flight", "hidden", "exposed", "exposed share", "overlap",
                                     *last)]
    for row in rows:
        lead = (format_time(row["compute_s"]),) if with_compute else (str(row["count"]),)
        tail = (format_time(row["hbm_stall_s"]),) if with_compute else ()
        table.append((row[column], *lead, format_time(row["comm_s"]), format_time(row["hidden_s"]),
                      format_time(row["exposed_s"]), format_time(row["exposed_share_s"]),
                      _percent(row["overlap_efficiency"]), *tail))
    print_table(table)


def _print_path(path: dict[str, Any]) -> None:
    total = path["total_s"]
    kinds = ", ".join(f"{kind} {format_time(time)} ({time / total:.1%})" for kind, time in path["by_kind"].items())
    print(f"critical path {format_time(total)}: {kinds or 'empty'}")
    runs = path["runs"]
    longest = sorted(sorted(range(len(runs)), key=lambda k: -runs[k]["duration_s"])[:LONGEST_RUNS])
    which = f"the {len(longest)} longest of its {len(runs)}" if len(longest) < len(runs) else f"its {len(runs)}"
    print(f"  {which} runs, in time order:")
    table: list[tuple[str, ...]] = [("start", "duration", "op", "on the path")]
    for k in longest:
        run = runs[k]
        parts = sorted(run["by_kind"].items(), key=lambda item: -item[1])
        table.append((format_time(run["start_s"]), format_time(run["duration_s"]), run["op"],
                      ", ".join(f"{kind} {format_time(time)}" for kind, time in parts)))
    print_table(table, indent="  ")


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction:.1%}"


COMMANDS = MappingProxyType({"summarize": summarize_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
