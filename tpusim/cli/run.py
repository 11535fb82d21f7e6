"""``tpusim run`` (an experiment file) and ``tpusim schema`` (its JSON Schema, for editors)."""

from __future__ import annotations

import argparse
import json
from types import MappingProxyType

from tpusim.cli.common import count_arg, emit_json, name_arg, note, out_dir_arg, positive_number_arg
from tpusim.cli.progress import Bar


def run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", help="a packaged experiment name (see 'tpusim list experiments') or a YAML file")
    p.add_argument("--out", type=out_dir_arg, required=True, help="output folder (created if missing)")
    p.add_argument("--jobs", type=count_arg("--jobs"), default=1, help="parallel worker processes")
    p.add_argument("--executor", type=name_arg("executor", ["local", "dask"]), default="local",
                   help="local (worker processes) or dask (a Dask scheduler, see --scheduler)")
    p.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786 (default: a LocalCluster)")
    p.add_argument("--resume", action="store_true", help="keep finished points in --out and run the rest")
    p.add_argument("--force", action="store_true",
                   help="replace results of another experiment found in --out (refused otherwise)")
    p.add_argument("--timeout", type=positive_number_arg("--timeout"),
                   help="stop any point still running after this many seconds (its row says so; exit 1 at the end)")
    p.add_argument("--connect-timeout", type=positive_number_arg("--connect-timeout"),
                   help="seconds to wait for the Dask --scheduler to answer, and for it to have a worker (default: 10)")
    p.add_argument("--yes", action="store_true", help="run sweeps larger than the file's max_points")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no estimate line")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(handler=run)


def schema_arguments(s: argparse.ArgumentParser) -> None:
    s.set_defaults(handler=schema)


def run(args: argparse.Namespace) -> int:
    from tpusim.experiments.run import POINT_ERRORS_EXIT, run_experiment

    with Bar("point", quiet=args.quiet) as bar:
        summary = run_experiment(args.experiment, args.out, jobs=args.jobs, executor=args.executor,
                                 scheduler=args.scheduler, resume=args.resume, timeout=args.timeout, force=args.force,
                                 yes=args.yes, progress=bar.update, cache=args.context.cache_folder,
                                 estimate=None if args.quiet else bar.say,
                                 **({} if args.connect_timeout is None else {"connect_timeout": args.connect_timeout}))
    # a point that met a bug, or one that could not be simulated: the others ran, and the run still fails
    failed = 1 if summary.internal_errors else POINT_ERRORS_EXIT if summary.errors else 0
    if args.json:
        emit_json(summary.to_dict())
        return failed
    print(f"{summary.finished} of {summary.total} points in {summary.out}"
          f"{f' ({summary.skipped} resumed)' if summary.skipped else ''}: results.csv, results.json, run_meta.json")
    for text in summary.notes:
        note(text)
    if summary.errors:
        note(f"{summary.errors} point(s) could not be simulated; see the 'error' column")
    if summary.internal_errors:
        note(f"{summary.internal_errors} point(s) met an internal error (a bug in tpusim; their 'error' column "
             "begins 'internal error:'); the other points are in the results")
    return failed


def schema(args: argparse.Namespace) -> int:
    del args
    from tpusim.config import Experiment

    print(json.dumps(Experiment.model_json_schema(by_alias=True), indent=2))
    return 0


COMMANDS = MappingProxyType({"run": run_arguments, "schema": schema_arguments})
"""The flags of each command this module runs, given to its parser once the command is chosen (cli/main.py)."""
