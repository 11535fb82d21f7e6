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
command, which decides what an interrupt means, stops its workers itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["PARENT_POLL_S", "Lifeline", "die_with", "hold", "ignore_interrupts"]

PARENT_POLL_S = 0.5
"""How often a worker's watchdog checks that its parent still lives (the fallback where PR_SET_PDEATHSIG is
missing)."""
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def ignore_interrupts() -> None:
    """In a worker: SIGINT ignored (the command stops its workers), SIGTERM ends it at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


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
