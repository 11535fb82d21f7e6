"""Regenerate every figure in docs/ from the current model, in one step.

    python scripts/figures.py                    # every figure (hours: the tpuv4 and newer-generation families)
    python scripts/figures.py --list             # each figure with the command that draws it
    python scripts/figures.py --only pod,headline --jobs 2

Each figure is drawn by one ``tpusim`` command: a reproduction family (its ``FAMILY.png``) or a ``--link-map``.
The runs go to ``--runs`` (default ``out/figures``), one folder per figure, and are resumed there (``reproduce
--resume``), so an interrupted regeneration picks up where it stopped; a figure is copied into ``--docs`` only
once its command has succeeded, so a failure never replaces a figure with nothing. Exit status 0 when every
figure asked for was drawn, 1 when any command failed (each failure is one line on stderr), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Figure:
    """One figure of docs/: ``NAME.png``, the ``tpusim`` arguments that draw it, and where the drawing lands."""

    name: str
    arguments: tuple[str, ...]
    family: str | None = None  # a reproduction family (its figure is RUN/FAMILY/FAMILY.png), else a link map

    def command(self, run: Path, jobs: int) -> list[str]:
        if self.family is None:
            return [*self.arguments, "--link-map", str(self.drawing(run))]
        return ["reproduce", self.family, *self.arguments, "--out", str(run), "--resume", "--jobs", str(jobs)]

    def drawing(self, run: Path) -> Path:
        return run / self.family / f"{self.family}.png" if self.family else run / f"{self.name}.png"


def _family(name: str, family: str, *arguments: str) -> Figure:
    return Figure(name, ("--quick", *arguments), family)


FIGURES: tuple[Figure, ...] = (
    _family("headline", "headline", "--lead-ranges"),
    _family("headline-tpuv4", "headline", "--hardware", "tpuv4"),
    _family("headline-tpuv5e", "headline", "--hardware", "tpuv5e"),
    _family("headline-tpuv5p", "headline", "--hardware", "tpuv5p"),
    _family("headline-tpuv6e", "headline", "--hardware", "tpuv6e"),
    _family("breakdown", "breakdown"),
    _family("weak-scaling", "weak-scaling"),
    _family("strong-scaling", "strong-scaling"),
    _family("sensitivity", "sensitivity"),
    _family("slice-sweep", "slice-sweep"),
    _family("slice-sweep-tpuv4", "slice-sweep", "--hardware", "tpuv4"),
    _family("mesh-shapes", "mesh-shapes"),
    _family("mesh-shapes-tpuv4", "mesh-shapes", "--hardware", "tpuv4"),
    _family("tuner-accuracy", "tuner-accuracy"),
    _family("tuner-accuracy-pod", "tuner-accuracy-pod"),
    _family("pod", "pod"),
    _family("pod-tpuv5p", "pod", "--hardware", "tpuv5p"),
    Figure("linkmap-allgather-4x4x4", ("collective", "--hardware", "tpuv4", "--topology", "4x4x4", "--mesh", "16x4",
                                       "--op", "all-gather", "--axis", "0", "--bytes", "64MB")),
    Figure("linkmap-pod-step", ("step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--topology", "16x16x16",
                                "--mesh", "256x16", "--algorithm", "meshslice")),
)
"""Every figure of docs/, in the order they are drawn (tests/experiments/test_figure_script.py holds the list
to the files in docs/)."""


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python scripts/figures.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated figure names (see --list)")
    parser.add_argument("--runs", type=Path, default=ROOT / "out" / "figures",
                        help="where the runs are kept and resumed (default: out/figures)")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs", help="where the figures go (default: docs)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes of each reproduction (default: 2)")
    parser.add_argument("--list", action="store_true", help="print each figure and its command, run nothing")
    args = parser.parse_args(argv)
    known = {figure.name for figure in FIGURES}
    wanted = [name.strip() for name in args.only.split(",") if name.strip()] if args.only else []
    unknown = [name for name in wanted if name not in known]
    if unknown:
        parser.exit(2, f"--only: unknown figure {unknown[0]!r}; valid: {', '.join(sorted(known))}\n")
    if args.jobs < 1:
        parser.exit(2, f"--jobs {args.jobs}: valid: a whole number of at least 1\n")
    args.wanted = wanted or [figure.name for figure in FIGURES]
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    chosen = [figure for figure in FIGURES if figure.name in args.wanted]
    if args.list:
        for figure in chosen:
            print(f"{figure.name}.png: tpusim {' '.join(figure.command(Path('RUNS') / figure.name, args.jobs))}")
        return 0
    failed = 0
    for figure in chosen:
        run = args.runs / figure.name
        run.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "tpusim", *figure.command(run, args.jobs)]
        begin = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - begin
        drawing = figure.drawing(run)
        if done.returncode != 0 or not drawing.is_file():
            failed += 1
            reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no figure drawn"
            print(f"{figure.name}.png: not redrawn (exit {done.returncode} after {wall:.0f} s): {reason}",
                  file=sys.stderr)
            continue
        args.docs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(drawing, args.docs / f"{figure.name}.png")
        print(f"{figure.name}.png: redrawn in {wall:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
