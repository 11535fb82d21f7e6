"""The files of a run: results.csv, results.json (deterministic) and run_meta.json (times), written safely.

After every finished point both result files are rewritten through a temporary file and a rename, so a
run killed at any moment leaves valid files holding every point that finished. ``results.json`` carries
the resolved experiment, the tpusim version and a config hash, but no times or dates: two runs of the same
experiment, on any executor, produce byte-identical files. Wall-clock times go to ``run_meta.json``.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import tpusim
from tpusim.engine.atomic import write_atomic
from tpusim.errors import OutputPathError


def check_output_dir(out: Path) -> None:
    """Fail before any simulation if ``out`` cannot hold the results."""
    if out.exists() and not out.is_dir():
        raise OutputPathError(f"output path {str(out)!r} is a file; give a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".tpusim-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise OutputPathError(f"output folder {str(out)!r} is not writable: {error.strerror}") from None


def _cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, float):
        return repr(value)
    return value


def render_csv(rows: list[dict[str, Any]], preferred: list[str]) -> str:
    """CSV text; columns in ``preferred`` order first, then any others sorted (never dict order)."""
    present = {k for row in rows for k in row}
    columns = [k for k in preferred if k in present] + sorted(present.difference(preferred))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k, "")) for k in columns})
    return buffer.getvalue()


class ResultsFiles:
    """The results of one run in folder ``out``."""

    def __init__(self, out: Path, experiment: dict[str, Any], config_hash: str, total: int,
                 columns: list[str]) -> None:
        self.out = out
        self.columns = columns
        self.experiment = experiment
        self.config_hash = config_hash
        self.total = total
        self.points: dict[int, dict[str, Any]] = {}
        self.rows: dict[int, dict[str, Any]] = {}
        self.wall: dict[int, float] = {}

    def resume(self) -> int:
        """Load finished points of an earlier run of the same experiment; returns how many."""
        path = self.out / "results.json"
        if not path.exists():
            return 0
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return 0
        if data.get("config_hash") != self.config_hash:
            raise OutputPathError(
                f"{str(path)!r} holds results of a different experiment (config hash "
                f"{data.get('config_hash')!r}, this one {self.config_hash!r}); use another --out folder"
            )
        for entry in data.get("points", []):
            index = int(entry["index"])
            self.points[index] = entry
            self.rows[index] = entry["row"]
        meta = self.out / "run_meta.json"
        if meta.exists():
            try:
                self.wall = {int(k): v for k, v in json.loads(meta.read_text()).get("point_wall_s", {}).items()}
            except (OSError, json.JSONDecodeError, ValueError):
                self.wall = {}
        return len(self.points)

    def add(self, index: int, point_hash: str, settings: dict[str, Any], outcome: dict[str, Any],
            row: dict[str, Any], wall_s: float) -> None:
        self.points[index] = {"index": index, "point_hash": point_hash, "point": settings, "row": row,
                              "error": outcome["error"], "result": outcome["result"]}
        self.rows[index] = row
        self.wall[index] = wall_s
        self.flush()

    def flush(self, meta: dict[str, Any] | None = None) -> None:
        order = sorted(self.points)
        write_atomic(self.out / "results.csv", render_csv([self.rows[i] for i in order], self.columns))
        document = {
            "tpusim_version": tpusim.__version__,
            "config_hash": self.config_hash,
            "experiment": self.experiment,
            "points_total": self.total,
            "points_finished": len(order),
            "points": [self.points[i] for i in order],
        }
        write_atomic(self.out / "results.json", json.dumps(document, sort_keys=True, indent=1, allow_nan=True))
        run_meta = {"point_wall_s": {str(i): self.wall[i] for i in sorted(self.wall)}}
        run_meta.update(meta or {})
        write_atomic(self.out / "run_meta.json", json.dumps(run_meta, sort_keys=True, indent=1))
