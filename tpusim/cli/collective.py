"""``tpusim collective``: one collective on every group of a logical axis, timed and checked against its twin."""

from __future__ import annotations

import argparse

from tpusim.cli.common import count_arg, emit_json, note, size_arg
from tpusim.cli.step import add_overrides
from tpusim.experiments import calls
from tpusim.units import format_size, format_time
from tpusim.vocabulary import CollectiveOp, Ring


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collective", help="simulate one collective over a logical mesh axis")
    p.add_argument("--hardware", required=True, help="hardware profile name or YAML path (tpusim list hardware)")
    p.add_argument("--topology", help="physical network: TPUv4 slice AxBxC, torus:AxB[xC] or mesh:AxB[xC]")
    p.add_argument("--mesh", required=True, help="logical mesh RxC")
    p.add_argument("--axis-map", help="logical axes onto physical ones, e.g. 'x*y,z'")
    p.add_argument("--axis", type=int, choices=[0, 1], required=True,
                   help="0: the R chips sharing a column; 1: the C chips sharing a row")
    p.add_argument("--op", required=True, choices=[o.value for o in CollectiveOp])
    p.add_argument("--bytes", required=True, type=size_arg("--bytes"),
                   help="whole tensor of one group (gather/scatter/reduce/all-to-all) or message size")
    p.add_argument("--chunks", type=count_arg("--chunks"), default=1, help="pipelined chunks per message")
    p.add_argument("--ring", choices=[r.value for r in Ring], default="bi", help="ring variant (default bi)")
    p.add_argument("--root", type=int, default=0, help="broadcast/reduce root; send-recv source rank")
    p.add_argument("--offset", type=int, default=1, help="shift distance; send-recv destination rank")
    p.add_argument("--fidelity", choices=["full"], default="full")
    add_overrides(p)
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    result = calls.collective(
        hardware=args.hardware, mesh=args.mesh, axis=args.axis, op=args.op, bytes=args.bytes,
        topology=args.topology, axis_map=args.axis_map, chunks=args.chunks, ring=args.ring, root=args.root,
        offset=args.offset, slow_chips=args.slow_chip, slow_links=args.slow_link,
        context=args.context,
    )
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
    axis = result.mapping.get(f"axis{result.axis}", {})
    print(f"  mapping     axis {result.axis}: {axis}")
    for text in result.notes:
        note(text)
    return 0
