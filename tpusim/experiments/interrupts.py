"""Interrupts of a run: SIGINT (Ctrl-C) and SIGTERM end it cleanly, keeping every finished point.

The signals themselves are handled in ``tpusim.engine.signals`` (``interrupts_raised``: the first one raises
``Interrupted``, between events inside a simulation, and makes further ones ignored while the run cleans up);
a run turns that into ``RunInterrupted``, the one line that says what finished and how to go on.
"""

from __future__ import annotations

from tpusim.engine.signals import HANDLED, Interrupted, interrupts_raised
from tpusim.errors import TpusimError

__all__ = ["HANDLED", "Interrupted", "RunInterrupted", "interrupts_raised"]


class RunInterrupted(TpusimError):
    """A run stopped on a signal, its finished points kept; exit status 128 + the signal's number (130 for SIGINT,
    143 for SIGTERM), as a shell reports a process a signal ended. One line: what finished, then ``advice`` on how
    to go on (which depends on the command that ran)."""

    def __init__(self, what: str, signum: int, advice: str) -> None:
        super().__init__(f"{what}; {advice}")
        self.what = what
        self.signum = signum
        self.exit_code = 128 + signum
