"""``tpusim list {hardware,models,algorithms,collectives,experiments}``: what can be named on the command line."""

from __future__ import annotations

import argparse
from types import MappingProxyType

from tpusim.cli.common import emit_json, name_arg
from tpusim.config.catalog import EXPERIMENTS, HARDWARE, MODELS, Catalog
from tpusim.vocabulary import CollectiveOp


def list_arguments(parser: argparse.ArgumentParser) -> None:
    things = ["hardware", "models", "algorithms", "collectives", "experiments"]
    parser.add_argument("what", type=name_arg("listing", things), metavar="WHAT", help=f"one of: {', '.join(things)}")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # each listing imports only the catalogue it shows
    folder: Catalog | None = None
    if args.what == "hardware":
        from tpusim.hardware import list_hardware

        rows = [(p.name, p.kind, p.description) for p in list_hardware()]
        folder = HARDWARE
    elif args.what == "models":
        from tpusim.model.registry import list_models

        rows = [(m.name, "model", m.description) for m in list_models()]
        folder = MODELS
    elif args.what == "algorithms":
        from tpusim.gemm.registry import algorithms

        rows = [(a.name, "algorithm", a.summary) for a in algorithms().values()]
    elif args.what == "experiments":
        from tpusim.experiments.spec import load_experiment

        rows = [(name, "experiment", load_experiment(name).description) for name in EXPERIMENTS.names()]
        folder = EXPERIMENTS
    else:
        rows = [(op.value, "collective", "") for op in CollectiveOp]
    # the folder the files were read from, so a user finds the ones to copy and edit
    where = None if folder is None else str(folder.root().resolve())
    if args.json:
        emit_json({args.what: [{"name": n, "kind": k, "description": d} for n, k, d in rows]}
                  | ({} if where is None else {"folder": where}))
        return 0
    width = max(len(n) for n, _, _ in rows)
    for name, kind, description in rows:
        print(f"{name:<{width}}  {kind:<10}  {description}".rstrip())
    if where is not None:
        print(f"files in {where}")
    return 0


COMMANDS = MappingProxyType({"list": list_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
