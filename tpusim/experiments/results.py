"""The files of a run: the journal, results.csv and results.json (deterministic) and run_meta.json (times).

Every finished point is appended at once to the folder's journal ``results.jsonl`` (``journal``), one line under
a keyed digest: that is the record, and what ``--resume`` believes. ``results.json`` and ``results.csv`` are views
of it, rebuilt whole through temporary files and renames: at the start of a run, at its end, and in between
whenever the points finished since the last rebuild amount to an eighth of those the views hold (by the bytes of
their journal lines), so a sweep of n points rebuilds them O(log n) times rather than n. Each point's part of
results.json is serialised once, the experiment once per run. ``run_meta.json`` holds the wall-clock times and
the keyed digests of the two views and of itself, so a view edited by hand, or left half-updated by a kill between
its two renames, is found and rebuilt from the journal when the folder is next opened.

``results.json`` carries the resolved experiment, the tpusim version and a config hash, but no times or dates: two
runs of the same experiment, on any executor, produce byte-identical files. Wall-clock times go to
``run_meta.json``; digests, which depend on the folder's key, to run_meta.json and the journal.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tpusim
from tpusim.errors import OutputPathError
from tpusim.experiments.journal import JOURNAL_NAME, Journal
from tpusim.experiments.rows import row_of
from tpusim.files import FileRefused, check_target, create_exclusive, read_bounded, replace_together
from tpusim.keys import KEY_NAME, folder_key, keyed_digest, verified

RESULT_FILES = ("results.csv", "results.json", "run_meta.json", JOURNAL_NAME, KEY_NAME)
"""The files a run writes in its folder (and reads back to resume)."""
VIEWS = ("results.json", "results.csv")
"""The files rebuilt from the journal, in the order they are renamed."""
REBUILD_SHARE = 8
"""The views are rebuilt once the points finished since the last rebuild reach 1/REBUILD_SHARE of the journal
bytes of the points they hold: a geometric schedule, so the bytes written stay proportional to the results'."""


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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _read_state(path: Path) -> Any:
    """The JSON document of the run's own file at ``path`` (None where there is none, or it is not JSON); one
    that is not a regular file or larger than the limit ``results_bytes`` is refused in one line."""
    if not os.path.lexists(path):
        return None
    try:
        return json.loads(read_bounded(path, "results file", "results_bytes", follow=False),
                          parse_constant=_no_constant)
    except FileRefused as refused:
        raise OutputPathError(f"{refused.message}; it cannot be resumed or replaced (use another --out folder)",
                              ) from None
    except (ValueError, RecursionError):  # not JSON (a truncated or foreign file): as good as none
        return None


def _cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True, allow_nan=False)
    if isinstance(value, float):
        return repr(value)
    return value


def render_csv(rows: list[dict[str, Any]], preferred: list[str]) -> str:
    """CSV text; columns in ``preferred`` order first, then any others sorted (never dict order)."""
    present = {k for row in rows for k in row} if rows else set(preferred)  # no rows: the header all the same
    columns = [k for k in preferred if k in present] + sorted(present.difference(preferred))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k, "")) for k in columns})
    return buffer.getvalue()




def _indented(value: Any, level: int) -> str:
    """``value`` as ``json.dumps(..., sort_keys=True, indent=1)`` writes it ``level`` levels deep in a document."""
    return json.dumps(value, sort_keys=True, indent=1, allow_nan=False).replace("\n", "\n" + " " * level)


def _stored(entry: dict[str, Any]) -> dict[str, Any]:
    """What a finished point of results.json says, but for its row (which is rebuilt from the rest)."""
    return {key: value for key, value in entry.items() if key != "row"}


class ResultsFiles:
    """The results of one run in folder ``out``: point ``i`` has the settings ``settings[i]`` and the hash
    ``hashes[i]`` (its settings and the content of every profile and model it names)."""

    def __init__(self, out: Path, experiment: dict[str, Any], config_hash: str, settings: list[dict[str, Any]],
                 hashes: list[str], columns: list[str], *, force: bool = False,
                 renamed: Callable[[int, str], None] | None = None) -> None:
        self.out = out
        self.force = force
        """Replace another experiment's results instead of refusing the folder (``--force``)."""
        self.columns = columns
        self.experiment = experiment
        self.config_hash = config_hash
        self.settings = settings
        self.hashes = hashes
        self.total = len(settings)
        self.renamed = renamed
        """Told ``(points written, file name)`` after each file is written (the fault-injection hook)."""
        self.points: dict[int, dict[str, Any]] = {}
        """The finished points the views hold, as results.json lists them."""
        self.rows: dict[int, dict[str, Any]] = {}
        self.wall: dict[int, float] = {}
        self.finished: set[int] = set()
        """Points that need not run again: those of the journal a resumed run believes (none for a fresh run)."""
        self.notes: list[str] = []
        self.written = 0
        """Points this run has recorded."""
        self._texts: dict[int, str] = {}  # each point's part of results.json, serialised once
        self._lines: dict[int, str] = {}  # and its line of results.csv
        self._sizes: dict[int, int] = {}  # and the bytes of its journal line
        self._journal_lines: dict[int, dict[str, Any]] = {}
        self._pending = 0
        self._held = 0
        self._meta: dict[str, Any] = {}
        self._key = b""
        self._journal: Journal | None = None
        self._view_digests: dict[str, str] = {}
        buffer = io.StringIO()
        csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n").writeheader()
        self._csv_header = buffer.getvalue()
        self._experiment_text = _indented(experiment, 1)

    # -------------------------------------------------------------------------------------------- opening

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
                "it names, has changed); use another --out folder, or --force to replace them"
            )
        return data

    def _listed(self, data: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """The finished points results.json lists, checked for shape (a malformed one is refused in one line)."""
        path = str(self.out / "results.json")
        entries = data.get("points", [])
        if not isinstance(entries, list):
            raise OutputPathError(f"{path!r}: 'points' is not a list; it cannot be resumed (use another --out folder)")
        listed: dict[int, dict[str, Any]] = {}
        for number, entry in enumerate(entries):
            index = entry.get("index") if isinstance(entry, dict) else None
            if (not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < self.total
                    or not isinstance(entry.get("row"), dict) or not isinstance(entry.get("point"), dict)
                    or not isinstance(entry.get("result") or {}, dict) or index in listed):
                raise OutputPathError(
                    f"{path!r}: finished point #{number} is malformed (its 'index' must be a distinct integer in "
                    f"0..{self.total - 1}, its 'row' and 'point' objects); it cannot be resumed (use another --out "
                    "folder)")
            listed[index] = entry
        return listed

    def open(self, resume: bool) -> None:
        """Take over the folder: refuse another experiment's results, load the journal's believed points (a resumed
        run skips them; a fresh one keeps them in the views until it has recomputed each), and rebuild the views
        where they lag the journal or do not match their digests."""
        data = self._earlier()
        listed = self._listed(data) if resume and data is not None else {}
        had_key = os.path.lexists(self.out / KEY_NAME)
        try:
            self._key = folder_key(self.out, "output folder")
        except FileRefused as refused:
            raise OutputPathError(f"{refused.message}; it cannot be resumed or replaced (use another --out folder)"
                                  ) from None
        except OSError as error:
            raise OutputPathError(f"cannot write the results in {str(self.out)!r}: {error.strerror or error}; the "
                                  "files there stay as they were last written") from None
        self._journal = Journal(self.out, self._key, self.config_hash)
        try:
            loaded = self._journal.load()
        except FileRefused as refused:
            raise OutputPathError(f"{refused.message}; it cannot be resumed or replaced (use another --out folder)"
                                  ) from None
        for index, line in sorted(loaded.entries.items()):
            if 0 <= index < self.total and line.get("point_hash") == self.hashes[index]:
                self._hold(index, line)
        if resume:
            self.finished = {i for i, entry in self.points.items() if not entry.get("stopped")}
            self._note_differences(listed, loaded.rejected)
        views_sound = had_key and self._views_verified()
        if had_key and not views_sound and all(os.path.lexists(self.out / name) for name in VIEWS):
            self.notes.append(f"results.json and results.csv in {str(self.out)!r} do not match their keyed digests in "
                              f"run_meta.json (edited, or a kill while they were written): rebuilt from {JOURNAL_NAME}")
        missing = not all(os.path.lexists(self.out / name) for name in VIEWS)
        if self.points or missing or (had_key and not views_sound):
            self._rebuild()
        else:  # views of an earlier run (or version) that the journal does not hold: kept until this run has points
            self._view_digests = {name: keyed_digest(self._key, self._view_bytes(name)) for name in VIEWS}

    def _note_differences(self, listed: dict[int, dict[str, Any]], rejected: int) -> None:
        """Say which finished points of results.json the journal does not back: they are never believed."""
        unbacked = [i for i in listed if i not in self.points]
        edited = [i for i in listed if i in self.points and _stored(listed[i]) != _stored(self.points[i])]
        if unbacked:
            self.notes.append(f"{len(unbacked)} finished point(s) of results.json (first: index {unbacked[0]}) have "
                              f"no verified line in {JOURNAL_NAME} (edited, or written by an earlier version): they "
                              "run again")
        if edited:
            self.notes.append(f"{len(edited)} finished point(s) of results.json (first: index {edited[0]}) differ "
                              f"from their verified line in {JOURNAL_NAME} (edited): rebuilt from it")
        if rejected:
            self.notes.append(f"{rejected} line(s) of {JOURNAL_NAME} failed their keyed digest (edited, or cut by a "
                              "kill): their points run again")

    def _views_verified(self) -> bool:
        """Whether run_meta.json verifies and holds the digests of the views as they are."""
        meta = _read_state(self.out / "run_meta.json")
        if not isinstance(meta, dict):
            return False
        signed = {key: value for key, value in meta.items() if key != "digest"}
        digests = meta.get("digests")
        if not verified(self._key, signed, meta.get("digest")) or not isinstance(digests, dict):
            return False
        if meta.get("config_hash") != self.config_hash:
            return False
        for name in VIEWS:
            path = self.out / name
            if not os.path.lexists(path):
                return False
            try:
                content = read_bounded(path, "results file", "results_bytes", follow=False)
            except FileRefused:
                return False
            if not verified(self._key, content, digests.get(name)):
                return False
        return True

    def _view_bytes(self, name: str) -> bytes:
        try:
            return read_bounded(self.out / name, "results file", "results_bytes", follow=False)
        except FileRefused as refused:
            raise OutputPathError(f"{refused.message}; it cannot be resumed or replaced (use another --out folder)"
                                  ) from None

    # -------------------------------------------------------------------------------------------- points

    def _hold(self, index: int, line: dict[str, Any]) -> None:
        """Put the point of journal ``line`` in the views."""
        settings = self.settings[index]
        row = row_of(index, settings, line, self.columns)
        entry = {"index": index, "point_hash": line["point_hash"], "point": settings, "row": row,
                 "error": line.get("error"), "result": line.get("result")}
        if line.get("stopped"):  # stopped before it finished (--timeout): --resume runs it again
            entry["stopped"] = True
        self.points[index] = entry
        self.rows[index] = row
        wall = line.get("wall_s")
        if isinstance(wall, int | float) and not isinstance(wall, bool):
            self.wall[index] = float(wall)
        self._journal_lines[index] = line
        self._texts[index] = _indented(entry, 2)
        buffer = io.StringIO()
        csv.DictWriter(buffer, fieldnames=self.columns, lineterminator="\n").writerow(
            {k: _cell(row.get(k, "")) for k in self.columns})
        self._lines[index] = buffer.getvalue()
        size = len(json.dumps(line, sort_keys=True))
        self._held += size - self._sizes.get(index, 0)
        self._sizes[index] = size

    def add(self, index: int, outcome: dict[str, Any], wall_s: float) -> None:
        """Record a finished point: its journal line at once, the views when they are due."""
        assert self._journal is not None, "open() first"
        line = self._journal.line(index, self.hashes[index], outcome, wall_s)
        self._guarded(lambda: self._journal.append(line) if self._journal is not None else 0)
        self.written += 1
        self._signal(JOURNAL_NAME)
        self._hold(index, line)
        self._pending += self._sizes[index]
        if self._pending * REBUILD_SHARE >= self._held - self._pending:
            self._rebuild()
        self._signal("")

    def _signal(self, name: str) -> None:
        if self.renamed is not None:
            self.renamed(self.written, name)

    # -------------------------------------------------------------------------------------------- writing

    def finish(self, meta: dict[str, Any]) -> None:
        """The last writes of a run: the views, and the journal with one line per point."""
        self._meta = meta
        self._rebuild()
        journal = self._journal
        if journal is not None:
            lines = [self._journal_lines[i] for i in sorted(self._journal_lines)]
            self._guarded(lambda: journal.compact(lines))

    def start(self, meta: dict[str, Any]) -> None:
        self._meta = meta
        self._write_meta()

    def _guarded(self, write: Callable[[], object]) -> None:
        """Run ``write``; a failure (a full disk, a file size limit) is one line saying why, and the files written
        before stay whole, since every write is atomic or an append."""
        try:
            write()
        except OSError as error:
            raise OutputPathError(f"cannot write the results in {str(self.out)!r}: {error.strerror or error}; the "
                                  "files there stay as they were last written") from None

    def _documents(self) -> tuple[bytes, bytes]:
        order = sorted(self.points)
        points = ("[\n  " + ",\n  ".join(self._texts[i] for i in order) + "\n ]") if order else "[]"
        document = (f'{{\n "config_hash": {json.dumps(self.config_hash)},\n "experiment": {self._experiment_text},'
                    f'\n "points": {points},\n "points_finished": {len(order)},\n "points_total": {self.total},'
                    f'\n "tpusim_version": {json.dumps(tpusim.__version__)}\n}}')
        table = self._csv_header + "".join(self._lines[i] for i in order)
        return document.encode(), table.encode()

    def _rebuild(self) -> None:
        """Rewrite results.json and results.csv (both prepared before either is renamed), then run_meta.json."""
        document, table = self._documents()
        files = [(self.out / "results.json", document), (self.out / "results.csv", table)]
        self._guarded(lambda: replace_together(files, "results file",
                                               lambda path: self._signal(path.name)))
        self._pending = 0
        self._view_digests = {"results.json": keyed_digest(self._key, document),
                              "results.csv": keyed_digest(self._key, table)}
        self._write_meta()

    def _write_meta(self) -> None:
        meta: dict[str, Any] = {"point_wall_s": {str(i): self.wall[i] for i in sorted(self.wall)},
                                "config_hash": self.config_hash, "digests": self._view_digests}
        meta.update(self._meta)
        meta["digest"] = keyed_digest(self._key, meta)
        text = json.dumps(meta, sort_keys=True, indent=1, allow_nan=False).encode()
        self._guarded(lambda: replace_together([(self.out / "run_meta.json", text)], "results file"))
