"""A timing cache: results keyed by everything that determines them, in memory and optionally on disk.

The key is a hash of a canonical JSON rendering of the inputs (problem, algorithm parameters, mesh and
its mapping, the whole hardware profile, fidelity, overrides). A cache lives on a
``Context`` (no module-level state): memory entries for as long as the context, and disk entries only in a
folder the user names (``--cache DIR`` or ``TPUSIM_CACHE_DIR``), one JSON file per entry, written through a
temporary file and a rename.

A disk entry is an envelope ``{"format", "key", "digest", "value"}``: it is used only when it names the key it is
filed under, its value hashes to its digest, and its numbers are sound (``engine.result.bad_number``: finite, no
negative time, byte count or ratio). Anything else (a truncated, foreign, corrupted or hand-edited file) counts
as a miss, so the result is recomputed and the entry replaced (docs/results.md, "Caching").
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tpusim.engine.atomic import write_atomic
from tpusim.engine.result import bad_number
from tpusim.errors import OutputPathError

_MEMORY_ENTRIES = 4096
_FORMAT = 3  # 3: step results carry named_layout, so older entries no longer make a result


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, set | frozenset):
        return sorted(value)
    return str(value)


def cache_key(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=_default, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _unwrap(key: str, entry: Any) -> dict[str, Any] | None:
    """The value of a disk entry, or None when the entry is not a sound envelope for ``key``."""
    if not isinstance(entry, dict) or entry.get("format") != _FORMAT or entry.get("key") != key:
        return None
    value = entry.get("value")
    if not isinstance(value, dict) or entry.get("digest") != cache_key(value) or bad_number(value) is not None:
        return None
    return value


def check_cache_folder(folder: Path) -> None:
    """Fail before any work when ``folder`` cannot hold a disk cache."""
    if folder.exists() and not folder.is_dir():
        raise OutputPathError(f"cache folder {str(folder)!r} is a file; give a folder (it is created if missing)")
    parent = folder if folder.exists() else folder.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputPathError(f"cache folder {str(folder)!r}: {str(parent)!r} is not a folder")


class TimingCache:
    """Least-recently-used memory entries, plus JSON files in ``folder`` when one is set."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self.memory: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        """Disk entries found unsound and recomputed (see the module docstring)."""
        self.enabled = True

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        value = self.memory.get(key)
        if value is None and self.folder is not None:
            path = self.folder / f"{key}.json"
            if path.exists():
                try:
                    value = _unwrap(key, json.loads(path.read_text()))
                except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    value = None
                if value is None:
                    self.rejected += 1
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._remember(key, value)
        return copy.deepcopy(value)  # callers may annotate what they get; the entry must not change

    def put(self, key: str, value: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._remember(key, value)
        if self.folder is not None and bad_number(value) is None:
            self.folder.mkdir(parents=True, exist_ok=True)
            entry = {"format": _FORMAT, "key": key, "digest": cache_key(value), "value": value}
            write_atomic(self.folder / f"{key}.json", json.dumps(entry, sort_keys=True, allow_nan=False))

    def adopt(self, entries: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Entries another process computed (and filed in ``folder`` already, when it shares it): memory only."""
        if self.enabled:
            for key, value in entries:
                self._remember(key, value)

    def _remember(self, key: str, value: dict[str, Any]) -> None:
        self.memory[key] = value
        self.memory.move_to_end(key)
        while len(self.memory) > _MEMORY_ENTRIES:
            self.memory.popitem(last=False)

    def clear(self) -> None:
        self.memory.clear()
        self.hits = self.misses = 0
