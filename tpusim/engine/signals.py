"""Stop signals: SIGINT (Ctrl-C) and SIGTERM end a command within a second, wherever it is, even mid-simulation.

Within ``interrupts_raised()`` the first SIGINT or SIGTERM is recorded in the one ``StopSignals`` record this
process has (a signal handler is process-wide; it cannot be handed a context). Outside an event loop the handler
raises ``Interrupted`` at once, where the command is. Inside one (``run_events``) it only records the signal: an
exception raised there would most likely surface inside a chip program, a SimPy process generator, which SimPy
turns into a failed process and the simulation goes on for as long as it has events. The loop checks the record
between events instead and raises ``Interrupted`` from outside every process.

Once ``Interrupted`` is raised, further SIGINT and SIGTERM are ignored, so that the clean-up (stopping workers,
writing the result files) is not itself cut short; the handlers in place before are restored when the outermost
``interrupts_raised()`` ends. A signal that was ignored before (a job started with ``nohup``) stays ignored.
Python handles signals only in the main thread: elsewhere nothing is installed and the loop runs unchecked.

A fault-injection variable, ``TPUSIM_FAULT_SIMULATING_FILE=PATH``, makes every event loop create the file PATH once
it has processed its first event: the tests use it to signal a command demonstrably mid-simulation.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import simpy

__all__ = ["HANDLED", "SIMULATING_ENV", "Interrupted", "StopSignals", "interrupts_deferred", "interrupts_raised",
           "run_events"]

HANDLED = (signal.SIGINT, signal.SIGTERM)
SIMULATING_ENV = "TPUSIM_FAULT_SIMULATING_FILE"


class Interrupted(KeyboardInterrupt):
    """A signal asked the command to stop. A KeyboardInterrupt, so that no ``except Exception`` on the way swallows
    it; its only argument is the signal number, so it can be raised again from its args. Exit status 128 + the
    signal's number (130 for SIGINT, 143 for SIGTERM), as a shell reports a process that signal ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


class StopSignals:
    """What this process knows of stop signals: whether its handler is installed, the signal received (None until
    one is), and how many event loops are running (while any is, the handler only records)."""

    def __init__(self) -> None:
        self.installed: dict[int, Any] = {}
        self.depth = 0
        self.received: int | None = None
        self.loops = 0

    def handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.received is not None:  # a second one before the first was acted on: act now
            self.stop()
        self.received = signum
        if self.loops == 0:
            self.stop()

    def stop(self) -> None:
        """Raise the received signal as ``Interrupted``, ignoring further ones from now on."""
        signum = self.received
        assert signum is not None
        for handled in self.installed:
            signal.signal(handled, signal.SIG_IGN)
        raise Interrupted(signum)


_STOP = StopSignals()
"""The process's one record: signal handlers are process-wide, so is what they record."""


@contextmanager
def interrupts_raised() -> Iterator[None]:
    """SIGINT and SIGTERM raise ``Interrupted`` (once) in the body, between events inside a simulation. Nested
    uses share the outermost one's handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _STOP.depth:
        _STOP.depth += 1
        try:
            yield
        finally:
            _STOP.depth -= 1
        return
    _STOP.received, _STOP.depth = None, 1
    for signum in HANDLED:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            _STOP.installed[signum] = signal.signal(signum, _STOP.handle)
    try:
        yield
    finally:
        for handled, handler in _STOP.installed.items():
            signal.signal(handled, signal.SIG_DFL if handler is None else handler)
        _STOP.installed.clear()
        _STOP.received, _STOP.depth = None, 0


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Within ``interrupts_raised()``: a stop signal received in the body is only recorded, and raised as
    ``Interrupted`` as the body ends (for work that must not be cut midway, such as starting a pool's workers;
    a second signal still acts at once). A body that fails after a stop signal arrived is taken as stopped by
    it: the signal reached the whole process group, and what the body waited for most likely died of it."""
    _STOP.loops += 1
    failure: Exception | None = None
    try:
        yield
    except Exception as error:
        failure = error
    finally:
        _STOP.loops -= 1
    if _STOP.received is not None and _STOP.installed and not _STOP.loops:
        try:
            _STOP.stop()
        except Interrupted as stopped:
            raise stopped from failure
    if failure is not None:
        raise failure


def run_events(env: simpy.Environment) -> None:
    """Process ``env``'s events until none is left (``env.run()``), raising ``Interrupted`` between two events once
    a stop signal was received."""
    from simpy.core import EmptySchedule  # here: the command line installs the handlers before it imports SimPy

    step = env.step
    simulating = os.environ.get(SIMULATING_ENV)
    _STOP.loops += 1
    try:
        if simulating:
            step()
            with open(simulating, "a"):
                pass
        while True:
            if _STOP.received is not None:
                _STOP.stop()
            step()
    except EmptySchedule:
        return
    finally:
        _STOP.loops -= 1
