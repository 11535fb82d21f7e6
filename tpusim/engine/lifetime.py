"""How a worker process dies with the command that started it, however that command ends (even by SIGKILL).

Two ties, for the two ways a worker is started:

- ``die_with(parent)``, for a worker the command forked itself (``tpusim run``'s workers): on Linux the kernel
  sends it SIGKILL the moment its parent exits (``prctl`` with ``PR_SET_PDEATHSIG``), and on every system a
  watchdog thread ends it within ``PARENT_POLL_S`` once its parent is gone (``os.getppid()`` then names another
  process).
- a ``Lifeline``, for a worker whose parent is not the command (the tuner's workers are forked by a
  multiprocessing forkserver, so the two ties above would tie them to the forkserver, which itself lives as long
  as they do): the command holds the only write end of a pipe, the worker a read end, and the worker's watchdog
  ends it the moment that pipe reports end-of-file, which the kernel does when the command exits, or at once when
  the command ``cut``s it. The forkserver and the resource tracker then exit on their own: they live only while
  a process that uses them does.

Either way a worker ignores SIGINT (``ignore_interrupts``): Ctrl-C reaches the whole process group, and the
command, which decides what an interrupt means, stops its workers itself. A process started from a fresh
interpreter (the forkserver and the resource tracker) would hear a Ctrl-C during its own imports, before it could
ignore one, and print a traceback, and a SIGTERM to the process group would kill the forkserver under a worker
being started; so the command starts them with both ignored (``deaf_children``), which they keep until the
command is gone (the workers forked from the forkserver set their own, ``ignore_interrupts``). A worker still
starting when the command stops would fail to read what the command sent it and print that; so the command
defers stop signals until its workers have started (``engine.signals.interrupts_deferred``) and stops them with
SIGKILL, which prints nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["PARENT_POLL_S", "Lifeline", "deaf_children", "die_with", "hold", "ignore_interrupts"]

PARENT_POLL_S = 0.5
"""How often a worker's watchdog checks that its parent still lives (the fallback where PR_SET_PDEATHSIG is
missing)."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def ignore_interrupts() -> None:
    """In a worker: SIGINT ignored (the command stops its workers), SIGTERM ends it at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def deaf_children() -> Iterator[None]:
    """SIGINT and SIGTERM ignored while the block starts processes from a fresh interpreter, restored after: an
    ignored signal stays ignored across ``exec`` (a handler or a blocked mask does not survive
    ``multiprocessing``'s spawn), so they start deaf to both and live until the command is gone. Keep the block
    to the spawn itself (milliseconds): a signal within it is lost. Off the main thread, where handlers cannot
    change, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def die_with(parent: int) -> None:
    """Make this process end when process ``parent``, its parent, does."""
    if sys.platform.startswith("linux"):
        # without a libc to ask, the watchdog below still ends the worker
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    if os.getppid() != parent:  # the parent died before the kernel was asked to tell
        os._exit(1)
    threading.Thread(target=watch, name="tpusim-parent-watch", daemon=True).start()


class Lifeline:
    """The command's end of a lifeline: ``reader`` goes to each worker (as an argument of its start, which
    multiprocessing hands over as a file descriptor); the write end never leaves this process."""

    def __init__(self, context: Any) -> None:
        self.reader, self._writer = context.Pipe(duplex=False)

    def cut(self) -> None:
        """End every worker holding the lifeline now (what they run is lost)."""
        self._writer.close()
        self.reader.close()


def hold(reader: Connection) -> None:
    """In a worker: end this process once the lifeline ``reader`` is cut or its command is gone."""

    def watch() -> None:
        # nothing is ever sent: the wait ends only at end-of-file
        with contextlib.suppress(EOFError, OSError):
            reader.recv_bytes()
        os._exit(1)

    threading.Thread(target=watch, name="tpusim-lifeline", daemon=True).start()
