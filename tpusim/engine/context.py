"""The context of a session: the caches its simulations share, held explicitly instead of in module state.

A ``Context`` is made where work enters tpusim (a command, an API call, an experiment point) and passed down
to every simulation. It holds the timing cache (results keyed by everything that determines them; in memory,
and on disk where a folder is named) and a memo that the network layer uses for per-link collective plans,
which depend only on the call and the group's embedding and are reused across the simulations of one
mapping. Two contexts share nothing; a fresh one is empty.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from tpusim.engine.cache import TimingCache, check_cache_folder
from tpusim.errors import OutputPathError

__all__ = ["CACHE_ENV", "Context"]

T = TypeVar("T")

CACHE_ENV = "TPUSIM_CACHE_DIR"
"""Environment variable naming a disk cache folder when no folder is given explicitly."""


@dataclass
class Context:
    """Caches one session's simulations share."""

    timings: TimingCache = field(default_factory=TimingCache)
    memo: dict[Any, Any] = field(default_factory=dict)
    """Network-layer memo (collective plans by call and group embedding); entries keep their keys alive."""

    @classmethod
    def with_cache(cls, folder: Path | str | None = None) -> Context:
        """A context whose timing cache also persists in ``folder`` (default: ``$TPUSIM_CACHE_DIR`` if set)."""
        chosen = folder if folder is not None else os.environ.get(CACHE_ENV) or None
        if chosen is None:
            return cls(TimingCache(None))
        if isinstance(chosen, str) and not chosen.strip():  # Path("") is the current folder: never meant
            raise OutputPathError(f"cache folder {chosen!r} is empty; give the folder's path (it is created if "
                                  "missing)")
        check_cache_folder(Path(chosen))
        return cls(TimingCache(Path(chosen)))

    @property
    def cache_folder(self) -> Path | None:
        return self.timings.folder

    def loaded(self, kind: str, name: str, load: Callable[[str], T]) -> T:
        """``load(name)``, once per context: a named profile or model read again only when its file changed."""
        key = ("loaded", kind, name)
        stamp = _stamp(name)
        hit = self.memo.get(key)
        if hit is not None and hit[0] == stamp:
            return cast(T, hit[1])
        value = load(name)
        self.memo[key] = (stamp, value)
        return value


def _stamp(name: str) -> tuple[int, int] | None:
    """What identifies the content of a file named by a user (None for a packaged name)."""
    try:
        status = os.stat(name)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size)
