"""The journal of a run folder: one line per finished point, appended as it finishes, each under a keyed digest.

``results.jsonl`` is the record a run keeps of its finished points: one JSON object per line, appended with a
single ``write`` the moment a point finishes, so a run's writes grow with its points (results.json and results.csv
are views rebuilt from it, ``results``). Each line holds the run's ``config_hash``, the point's ``index`` and
``point_hash``, its ``error`` and ``result``, ``stopped`` when ``--timeout`` stopped it, its wall time, and
``digest``: HMAC-SHA256 of all of that under the folder's key (``tpusim.keys``). A line is believed only when its
digest verifies and it is of the run's configuration: a torn last line (a kill in the middle of a write), an edited
one or one of another experiment is left out, and its point runs again. A later line for an index replaces an
earlier one (a re-run appends over the points of the one before); ``compact`` rewrites the journal with one line
per point, atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpusim.files import FileRefused, open_regular, read_bounded, write_atomic
from tpusim.keys import keyed_digest, verified

__all__ = ["JOURNAL_NAME", "Journal", "Loaded"]

JOURNAL_NAME = "results.jsonl"
_SUBJECT = "results file"
_DIGEST = "digest"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@dataclass
class Loaded:
    """What a journal held: its believed lines by index (the last of each), and how many lines were not believed
    (``rejected``: unreadable or failing their digest; ``foreign``: of another configuration)."""

    entries: dict[int, dict[str, Any]]
    rejected: int = 0
    foreign: int = 0


class Journal:
    """The journal ``results.jsonl`` of folder ``out``, for the run of configuration ``config_hash``."""

    def __init__(self, out: Path, key: bytes, config_hash: str) -> None:
        self.path = out / JOURNAL_NAME
        self.key = key
        self.config_hash = config_hash
        self._torn = False
        """The file does not end with a newline (a kill cut its last line): the next line starts on a new one."""

    def load(self) -> Loaded:
        """The believed lines of the journal (none where there is no journal)."""
        loaded = Loaded({})
        if not os.path.lexists(self.path):
            return loaded
        data = read_bounded(self.path, _SUBJECT, "results_bytes", follow=False)
        self._torn = bool(data) and not data.endswith(b"\n")
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                entry = json.loads(line, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                loaded.rejected += 1
                continue
            if not isinstance(entry, dict) or not verified(self.key, _signed(entry), entry.get(_DIGEST)):
                loaded.rejected += 1
            elif entry.get("config_hash") != self.config_hash or not isinstance(entry.get("index"), int):
                loaded.foreign += 1
            else:
                loaded.entries[entry["index"]] = entry
        return loaded

    def line(self, index: int, point_hash: str, outcome: dict[str, Any], wall_s: float) -> dict[str, Any]:
        """The journal line of a finished point, digest included."""
        entry: dict[str, Any] = {"config_hash": self.config_hash, "index": index, "point_hash": point_hash,
                                 "error": outcome["error"], "result": outcome["result"], "wall_s": wall_s}
        if outcome.get("stopped"):
            entry["stopped"] = True
        entry[_DIGEST] = keyed_digest(self.key, entry)
        return entry

    def append(self, entry: dict[str, Any]) -> int:
        """Add ``entry`` as one line; returns its size in bytes. A failed write raises its ``OSError``."""
        text = ("\n" if self._torn else "") + json.dumps(entry, sort_keys=True, allow_nan=False) + "\n"
        data = text.encode()
        try:
            descriptor = open_regular(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _SUBJECT, follow=False,
                                      mode=0o666)
        except FileRefused as refused:
            raise OSError(None, refused.reason) from None
        try:
            if os.fstat(descriptor).st_nlink > 1:  # appending would write into every file it shares
                raise OSError(None, f"{str(self.path)!r} has other hard links; tpusim never writes through it")
            written = 0
            while written < len(data):
                written += os.write(descriptor, data[written:])
        finally:
            os.close(descriptor)
        self._torn = False
        return len(data)

    def compact(self, entries: list[dict[str, Any]]) -> None:
        """Replace the journal with ``entries``, one line each, atomically."""
        text = "".join(json.dumps(entry, sort_keys=True, allow_nan=False) + "\n" for entry in entries)
        write_atomic(self.path, text, _SUBJECT)
        self._torn = False


def _signed(entry: dict[str, Any]) -> dict[str, Any]:
    """The part of a line its digest covers: everything but the digest."""
    return {key: value for key, value in entry.items() if key != _DIGEST}
