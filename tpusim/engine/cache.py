"""A timing cache: results keyed by everything that determines them, in memory and optionally on disk.

The key is a hash of a canonical JSON rendering of the inputs (problem, algorithm parameters, mesh and
its mapping, the whole hardware profile, fidelity, overrides). A cache lives on a
``Context`` (no module-level state): memory entries for as long as the context, and disk entries only in a
folder the user names (``--cache DIR`` or ``TPUSIM_CACHE_DIR``), one JSON file per entry, written through a
temporary file and a rename.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tpusim.engine.atomic import write_atomic

_MEMORY_ENTRIES = 4096


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


class TimingCache:
    """Least-recently-used memory entries, plus JSON files in ``folder`` when one is set."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder
        self.memory: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.enabled = True

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        value = self.memory.get(key)
        if value is None and self.folder is not None:
            path = self.folder / f"{key}.json"
            if path.exists():
                try:
                    value = json.loads(path.read_text())
                except (OSError, json.JSONDecodeError):
                    value = None
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
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self.folder / f"{key}.json", json.dumps(value, sort_keys=True))

    def _remember(self, key: str, value: dict[str, Any]) -> None:
        self.memory[key] = value
        self.memory.move_to_end(key)
        while len(self.memory) > _MEMORY_ENTRIES:
            self.memory.popitem(last=False)

    def clear(self) -> None:
        self.memory.clear()
        self.hits = self.misses = 0
