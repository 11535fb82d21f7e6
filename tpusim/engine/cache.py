"""A timing cache: results keyed by everything that determines them, in memory and optionally on disk.

The key is a hash of a canonical JSON rendering of the inputs (problem, algorithm parameters, mesh and
its mapping, the whole hardware profile, fidelity, overrides). A cache lives on a
``Context`` (no module-level state): memory entries for as long as the context, and disk entries only in a
folder the user names (``--cache DIR`` or ``TPUSIM_CACHE_DIR``), one JSON file per entry, written through a
temporary file and a rename.

A disk entry is an envelope ``{"format", "key", "digest", "value"}``: it is used only when it names the key it is
filed under, its digest is the value's keyed digest under the cache folder's own key (``tpusim.keys``:
HMAC-SHA256, so an edited value with a recomputed plain hash is not believed), and its numbers are sound
(``engine.result.bad_number``: finite, no negative time, byte count or ratio). Anything else (a truncated,
foreign, corrupted, hand-edited or forged file) counts as a miss, so the result is recomputed and the entry
replaced (docs/results.md, "Caching"). So does an entry that is not a regular file (a FIFO, a device, a directory,
a link: read through ``tpusim.files``, never followed nor blocked on) or is larger than the limit
``cache_entry_bytes``; one that is not a regular file is not replaced either (``ignored`` says so, for a note).

A disk entry that cannot be written (a full disk, a file size limit, a read-only folder) loses nothing but the
entry: the result is returned all the same, and the first such failure is kept in ``write_failure`` for the command
to report (one line, exit 2) or the run to note.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tpusim.engine.result import bad_number
from tpusim.errors import OutputPathError, echo
from tpusim.files import FileRefused, UnsafePathError, read_bounded, target_kind, write_atomic
from tpusim.keys import KEY_NAME, folder_key, keyed_digest, verified

_MEMORY_ENTRIES = 4096
_FORMAT = 6  # 6: step results carry tokens_per_s and seconds_per_sequence; 5: step memory counts GeMM panels
# (4: keyed digests; 3: step results carry named_layout); older entries are misses


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


def _unwrap(key: str, entry: Any, secret: bytes | None) -> dict[str, Any] | None:
    """The value of a disk entry, or None when the entry is not a sound envelope for ``key`` under the folder's
    ``secret`` (None: the folder's key could not be read, so nothing there is believed)."""
    if not isinstance(entry, dict) or entry.get("format") != _FORMAT or entry.get("key") != key:
        return None
    value = entry.get("value")
    if (secret is None or not isinstance(value, dict) or bad_number(value) is not None
            or not verified(secret, value, entry.get("digest"))):
        return None
    return value


def check_cache_folder(folder: Path) -> None:
    """Fail before any work when ``folder`` cannot hold a disk cache."""
    try:
        if folder.exists() and not folder.is_dir():
            raise OutputPathError(f"cache folder {str(folder)!r} is a file; give a folder (it is created if missing)")
        parent = folder if folder.exists() else folder.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise OutputPathError(f"cache folder {str(folder)!r}: {str(parent)!r} is not a folder")
    except OSError as error:  # a name too long, a loop of links: the path cannot be looked at
        raise OutputPathError(f"cache folder {echo(str(folder))} cannot be used: {error.strerror or error}; give "
                              "another folder") from None


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
        self.write_failure: str | None = None
        """The first disk entry that could not be written, as one line saying why (None: every write worked)."""
        self.ignored: str | None = None
        """The first disk entry that is not a regular file, so neither read nor replaced, as one line."""
        self._secret: bytes | None = None  # the folder's key, read (or made) at its first use

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        value = self.memory.get(key)
        if value is None and self.folder is not None:
            path = self.folder / f"{key}.json"
            if os.path.lexists(path):
                try:
                    text = read_bounded(path, "cache entry", "cache_entry_bytes", follow=False)
                    value = _unwrap(key, json.loads(text.decode()), self._folder_secret())
                except (FileRefused, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
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
            path = self.folder / f"{key}.json"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                secret = self._folder_secret()
                if secret is None:
                    raise OSError(None, f"the cache folder's key file {str(self.folder / KEY_NAME)!r} cannot be used")
                entry = {"format": _FORMAT, "key": key, "digest": keyed_digest(secret, value), "value": value}
                write_atomic(path, json.dumps(entry, sort_keys=True, allow_nan=False), "cache entry")
            except UnsafePathError:
                kind = target_kind(path)
                if self.ignored is None:
                    self.ignored = (f"cache entry {str(path)!r} is {kind or 'not a regular file'}: ignored and not "
                                    "replaced (the result was computed)")
            except OSError as error:
                self._failed(f"cannot write the cache entry {str(path)!r}: {error.strerror or error}")

    def _folder_secret(self) -> bytes | None:
        """The cache folder's key (made there on first use); None where it cannot be read or made."""
        if self._secret is None and self.folder is not None and self.folder.is_dir():
            try:
                self._secret = folder_key(self.folder, "cache folder")
            except (FileRefused, OSError):
                return None
        return self._secret

    def _failed(self, why: str) -> None:
        """Keep the first write failure; the result it was for is kept in memory and returned all the same."""
        if self.write_failure is None:
            self.write_failure = f"{why}; the result was not cached (it is computed again next time)"

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
