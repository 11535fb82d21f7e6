"""Interrupts of a run: SIGINT (Ctrl-C) and SIGTERM end it cleanly, keeping every finished point.

Within ``interrupts_raised()`` the first SIGINT or SIGTERM raises ``Interrupted`` where the run is, and makes
further ones ignored, so that the clean-up (stopping the workers, writing the result files) is not itself cut
short; the handlers in place before are restored afterwards. A signal that was ignored before (a job started with
``nohup``) stays ignored. Python handles signals only in the main thread: elsewhere nothing is installed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from tpusim.errors import TpusimError

__all__ = ["HANDLED", "Interrupted", "RunInterrupted", "interrupts_raised"]

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A signal asked the run to stop. A KeyboardInterrupt, so that no ``except Exception`` on the way swallows it
    and whatever handles Ctrl-C handles it; its only argument is the signal number, so it can be raised again from
    its args."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class RunInterrupted(TpusimError):
    """A run stopped on a signal, its finished points kept; exit status 128 + the signal's number (130 for SIGINT,
    143 for SIGTERM), as a shell reports a process a signal ended. One line: what finished, then ``advice`` on how
    to go on (which depends on the command that ran)."""

    def __init__(self, what: str, signum: int, advice: str) -> None:
        super().__init__(f"{what}; {advice}")
        self.what = what
        self.signum = signum
        self.exit_code = 128 + signum


@contextmanager
def interrupts_raised() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Interrupted`` (once) in the body."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before: dict[int, Any] = {}

    def stop(signum: int, frame: FrameType | None) -> None:
        del frame
        for handled in before:
            signal.signal(handled, signal.SIG_IGN)
        raise Interrupted(signum)

    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            before[signum] = signal.signal(signum, stop)
    try:
        yield
    finally:
        for handled, handler in before.items():
            signal.signal(handled, signal.SIG_DFL if handler is None else handler)
