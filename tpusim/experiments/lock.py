"""The lock of a run folder: one ``tpusim run`` at a time writes into a folder.

``DIR/.lock`` is locked with ``flock(2)`` for the whole run and names its holder (pid and command line). The
kernel drops the lock when the holder exits, however it exits, so a lock file left by a run that died never blocks
the next one: its stale text is simply replaced. The file stays in the folder, since removing it would let a
waiting run lock a file of that name that another run has already replaced. POSIX only (``fcntl``).

The lock is opened through ``tpusim.files`` with ``O_NOFOLLOW`` and checked with ``fstat``: a ``.lock`` that is a
symbolic link (to a file outside the folder, say), a FIFO, a device or a directory is refused with one line and
never written, and so is one with other hard links (truncating it would empty the file it shares). The holder's
name is read back through the same descriptor, at most ``HOLDER_BYTES`` of it.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tpusim.errors import OutputPathError
from tpusim.files import FileRefused, open_regular

__all__ = ["LOCK_NAME", "FolderBusy", "folder_lock"]

LOCK_NAME = ".lock"
HOLDER_WAIT_S = 1.0
"""How long a refused run waits for the holder's name to appear in the lock file (it is written just after the lock
is taken)."""
HOLDER_POLL_S = 0.01
HOLDER_BYTES = 65536
"""The most of a lock file read to name its holder: a pid and a command line (a longer one names no holder)."""


class FolderBusy(OutputPathError):
    """Another run holds the output folder's lock."""


def _holder(handle: int) -> str:
    """Who holds the lock open as ``handle``, as its file says; a holder that has just taken the lock is given a
    moment to write its name there."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        try:
            found = json.loads(os.pread(handle, HOLDER_BYTES, 0))
            return f"pid {int(found['pid'])}: {found['command']}"
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return "a process that has not written its pid"
            time.sleep(HOLDER_POLL_S)


def _command() -> str:
    """This process's command line, as a person would have typed it (``tpusim run ...``,
    ``python -m tpusim run ...``)."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if program in ("", "-c", "__main__.py"):  # python -m / -c: the interpreter's own command line says more
        program, *rest = sys.orig_argv
        return shlex.join([Path(program).name, *rest])
    return shlex.join([program, *sys.argv[1:]])


@contextmanager
def folder_lock(out: Path) -> Iterator[None]:
    """Hold ``out``'s lock for the body, or fail at once with one line naming the holder."""
    import fcntl

    path = out / LOCK_NAME
    try:
        handle = open_regular(path, os.O_RDWR | os.O_CREAT, "the lock file", follow=False)
    except FileRefused as refused:
        if refused.kind is not None:
            raise OutputPathError(f"{refused.message}; tpusim never writes through it (remove it: the run "
                                  "creates its lock anew)") from None
        raise OutputPathError(f"output folder {str(out)!r} is not writable: {refused.reason}") from None
    try:
        if os.fstat(handle).st_nlink > 1:
            raise OutputPathError(f"the lock file {str(path)!r} has other hard links; tpusim never writes "
                                  "through it (remove it: the run creates its lock anew)")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(f"output folder {str(out)!r} is in use by another run ({_holder(handle)}); wait for it "
                             "to finish or give another --out folder") from None
        command = _command()
        try:
            os.ftruncate(handle, 0)
            os.pwrite(handle, json.dumps({"pid": os.getpid(), "command": command}).encode(), 0)
        except OSError:  # a full disk: the holder's name is only informative, and the run will say what failed
            pass
        yield
    finally:
        os.close(handle)
