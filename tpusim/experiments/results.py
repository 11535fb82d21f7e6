"""The files of a run: results.csv, results.json (deterministic) and run_meta.json (times), written safely.

After every finished point both result files are rewritten through a temporary file and a rename, so a
run killed at any moment leaves valid files holding every point that finished. ``results.json`` carries
the resolved experiment, the tpusim version and a config hash, but no times or dates: two runs of the same
experiment, on any executor, produce byte-identical files. Wall-clock times go to ``run_meta.json``.

Every file is written and read back through ``tpusim.files``: a results file that is not a regular file (a FIFO,
a device, a directory, a link) is refused with one line before any point runs, and one read back larger than the
limit ``results_bytes`` is refused, never read whole.
"""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
from pathlib import Path
from typing import Any

import tpusim
from tpusim.errors import OutputPathError
from tpusim.experiments.rows import row_of
from tpusim.files import FileRefused, check_target, create_exclusive, read_bounded, write_atomic

RESULT_FILES = ("results.csv", "results.json", "run_meta.json")
"""The files a run writes in its folder (and reads back, but for the CSV, to resume)."""


def check_output_dir(out: Path) -> None:
    """Fail before any simulation if ``out`` cannot hold the results (a name too long is one way, a results file
    that is a FIFO or a link another)."""
    try:
        if out.exists() and not out.is_dir():
            raise OutputPathError(f"output path {str(out)!r} is a file; give a folder (it is created if missing)")
        out.mkdir(parents=True, exist_ok=True)
        # this process's own, created anew (never a file or a link already there): runs may start side by side
        probe = out / f".tpusim-write-test.{os.getpid()}.{secrets.token_hex(4)}"
        os.close(create_exclusive(probe))
        probe.unlink()
    except OSError as error:
        raise OutputPathError(f"output folder {str(out)!r} is not writable: {error.strerror}") from None
    for name in RESULT_FILES:
        check_target(out / name, "results file")


def _read_state(path: Path) -> Any:
    """The JSON document of the run's own file at ``path`` (None where there is none, or it is not JSON); one
    that is not a regular file or larger than the limit ``results_bytes`` is refused in one line."""
    if not os.path.lexists(path):
        return None
    try:
        return json.loads(read_bounded(path, "results file", "results_bytes", follow=False))
    except FileRefused as refused:
        raise OutputPathError(f"{refused.message}; it cannot be resumed or replaced (use another --out folder)",
                              ) from None
    except (ValueError, RecursionError):  # not JSON (a truncated or foreign file): as good as none
        return None


def _wall_times(meta: Path) -> dict[int, float]:
    """The per-point wall times of an earlier run; none where the file is missing or unreadable (they are only
    informative)."""
    document = _read_state(meta)
    try:
        found = document.get("point_wall_s", {}) if document is not None else {}
        return {int(k): float(v) for k, v in found.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def _cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True, allow_nan=False)
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
                 columns: list[str], *, force: bool = False) -> None:
        self.out = out
        self.force = force
        """Replace another experiment's results instead of refusing the folder (``--force``)."""
        self.columns = columns
        self.experiment = experiment
        self.config_hash = config_hash
        self.total = total
        self.points: dict[int, dict[str, Any]] = {}
        self.rows: dict[int, dict[str, Any]] = {}
        self.wall: dict[int, float] = {}

    def _earlier(self) -> dict[str, Any] | None:
        """The results document already in the folder, if it is one; refuses one of another experiment, whose
        finished points a run must never replace."""
        path = self.out / "results.json"
        data = _read_state(path)
        if not isinstance(data, dict):
            return None
        if data.get("config_hash") != self.config_hash:
            if self.force:
                return None
            experiment = data.get("experiment")
            name = experiment.get("name") if isinstance(experiment, dict) else None
            raise OutputPathError(
                f"{str(path)!r} holds results of a different experiment ({name!r}, config hash "
                f"{data.get('config_hash')!r}; this one {self.config_hash!r}: the experiment, or a profile or model "
                "file it names, has changed); use another --out folder, or --force to replace them"
            )
        return data

    def claim(self) -> None:
        """Check, before a fresh run, that the folder holds no other experiment's results."""
        self._earlier()

    def resume(self) -> int:
        """Load finished points of an earlier run of the same experiment; returns how many."""
        data = self._earlier()
        if data is None:
            return 0
        path = str(self.out / "results.json")
        entries = data.get("points", [])
        if not isinstance(entries, list):
            raise OutputPathError(f"{path!r}: 'points' is not a list; it cannot be resumed (use another --out folder)")
        for number, entry in enumerate(entries):
            index = entry.get("index") if isinstance(entry, dict) else None
            if (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.total
                    or not isinstance(entry.get("row"), dict) or not isinstance(entry.get("point"), dict)
                    or not isinstance(entry.get("result") or {}, dict) or index in self.points):
                raise OutputPathError(
                    f"{path!r}: finished point #{number} is malformed (its 'index' must be a distinct integer in "
                    f"0..{self.total - 1}, its 'row' and 'point' objects); it cannot be resumed (use another --out "
                    "folder)")
            # rebuilt from the point and its result, so a folder written by an earlier version gets today's columns
            entry["row"] = row_of(index, entry["point"], entry, self.columns)
            self.points[index] = entry
            self.rows[index] = entry["row"]
        self.wall = _wall_times(self.out / "run_meta.json")
        return len(self.points)

    def add(self, index: int, point_hash: str, settings: dict[str, Any], outcome: dict[str, Any],
            wall_s: float) -> None:
        row = row_of(index, settings, outcome, self.columns)
        self.points[index] = {"index": index, "point_hash": point_hash, "point": settings, "row": row,
                              "error": outcome["error"], "result": outcome["result"]}
        if outcome.get("stopped"):  # stopped before it finished (--timeout): --resume runs it again
            self.points[index]["stopped"] = True
        self.rows[index] = row
        self.wall[index] = wall_s
        self.flush()

    def flush(self, meta: dict[str, Any] | None = None) -> None:
        """Rewrite the three files; a write that fails (a full disk, a file size limit) is one line saying why,
        and the files written before stay whole, since every write is atomic."""
        try:
            self._write(meta)
        except OSError as error:
            raise OutputPathError(f"cannot write the results in {str(self.out)!r}: {error.strerror or error}; the "
                                  "files there stay as they were last written") from None

    def _write(self, meta: dict[str, Any] | None) -> None:
        order = sorted(self.points)
        write_atomic(self.out / "results.csv", render_csv([self.rows[i] for i in order], self.columns),
                     "results file")
        document = {
            "tpusim_version": tpusim.__version__,
            "config_hash": self.config_hash,
            "experiment": self.experiment,
            "points_total": self.total,
            "points_finished": len(order),
            "points": [self.points[i] for i in order],
        }
        write_atomic(self.out / "results.json", json.dumps(document, sort_keys=True, indent=1, allow_nan=False),
                     "results file")
        run_meta = {"point_wall_s": {str(i): self.wall[i] for i in sorted(self.wall)}}
        run_meta.update(meta or {})
        write_atomic(self.out / "run_meta.json", json.dumps(run_meta, sort_keys=True, indent=1, allow_nan=False),
                     "results file")
