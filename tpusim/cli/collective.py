"""``tpusim collective``: one collective on every group of a logical axis, timed and checked against its twin."""

from __future__ import annotations

import argparse
from types import MappingProxyType

from tpusim.cli.common import announce_cost, emit_json, network_text, note
from tpusim.cli.derive import add_request_arguments, request_from_args
from tpusim.cli.link_map import add_link_map_argument, finish_link_map, start_link_map
from tpusim.config.requests import CollectiveRequest
from tpusim.units import format_size, format_time


def collective_arguments(p: argparse.ArgumentParser) -> None:
    add_request_arguments(p, CollectiveRequest)
    add_link_map_argument(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.runners import run_collective

    request = request_from_args(CollectiveRequest, args)
    assert isinstance(request, CollectiveRequest)
    announce_cost(request, args.context)
    link_busy = start_link_map(args.link_map)
    result = run_collective(request, args.context, link_busy=link_busy)
    finish_link_map(link_busy, args.link_map, result.time_s,
                    f"{result.op} of {format_size(result.bytes)} on axis {result.axis} of a {result.mapping['mesh']} "
                    f"mesh ({result.groups} groups of {result.group_size}), {result.mapping['topology']}",
                    result.notes)
    if args.json:
        emit_json(result.to_dict())
        return 0
    twin = "n/a" if result.analytic_time_s is None else format_time(result.analytic_time_s)
    print(f"{result.op} of {format_size(result.bytes)} on axis {result.axis} "
          f"({result.groups} groups of {result.group_size} chips), {result.hardware}")
    print(f"  time        {format_time(result.time_s)}   (closed form {twin})")
    if result.bytes_sent is not None:
        print(f"  bytes sent  {format_size(result.bytes_sent)} over all links; busiest link "
              f"{format_size(result.max_link_bytes or 0)}, {100 * (result.max_link_utilisation or 0):.1f}% busy")
    print(f"  transfers   {result.transfers}   events {result.events}")
    print(f"  schedule    {result.schedule}")
    print(f"  network     {network_text(result.mapping, None)}")
    for text in result.notes:
        note(text)
    return 0


COMMANDS = MappingProxyType({"collective": collective_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
