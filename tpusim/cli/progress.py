"""Progress bars of long commands: on standard error, only when it is a terminal, never on standard output.

A ``Bar`` is driven by the callbacks the layers below offer (stages of a search, points of a sweep, pieces of a
step): ``describe`` names what is running, ``update`` says how much of how much is done. Where the stream is not
a terminal (a pipe, a file, a test's capture) a bar writes nothing at all. tqdm is imported by the first bar
drawn, never when the command starts.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, TextIO

__all__ = ["Bar"]


class Bar:
    """A tqdm bar on ``stream`` (default: standard error) counting ``unit``s, drawn after ``delay_s`` seconds
    (so that a command that turns out quick shows none); nothing when the stream is not a terminal, or when
    ``quiet``."""

    def __init__(self, unit: str, *, stream: TextIO | None = None, delay_s: float = 0.0,
                 quiet: bool = False) -> None:
        target = stream if stream is not None else sys.stderr
        self._stream = target
        isatty = getattr(target, "isatty", None)
        self._bar: Any = None
        self._final: tuple[int, int | None] = (0, None)
        self._label: str | None = None
        if not quiet and callable(isatty) and isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=None, unit=unit, file=target, delay=delay_s, dynamic_ncols=True)

    @property
    def drawn(self) -> bool:
        """Whether this bar draws at all (its stream is a terminal)."""
        return self._bar is not None

    @property
    def counts(self) -> tuple[int, int | None]:
        """(done, total) as last updated (as closed, once closed); (0, None) for a bar that draws nothing."""
        return (self._bar.n, self._bar.total) if self._bar is not None else self._final

    def describe(self, text: str) -> None:
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=False)
            self._redraw()

    def update(self, done: int, total: int | None) -> None:
        if self._bar is None:
            return
        self._bar.total = total
        self._bar.update(done - self._bar.n)
        if done == total:  # the end of a phase is always shown (tqdm may skip an update that comes quickly)
            self._redraw()

    def phase(self, label: str, done: int, total: int | None) -> None:
        """``update`` within the phase ``label`` of a command; a new label starts counting from zero (the clock
        runs on, so a bar drawn late stays late)."""
        if self._bar is None:
            return
        if label != self._label:
            self._label = label
            self._bar.n = self._bar.last_print_n = 0
            self._bar.total = total
            self.describe(label)
        self.update(done, total)

    def say(self, line: str) -> None:
        """A line for the human on the bar's stream (above the bar, where one is drawn), whether or not a bar is
        drawn: an estimate before the work starts."""
        if self._bar is not None:
            self._bar.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    def _redraw(self) -> None:
        """Draw the bar now, unless it is still within its delay."""
        bar = self._bar
        if bar._time() >= bar.start_t + bar.delay:
            bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._final = self.counts
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
