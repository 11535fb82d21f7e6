"""Worker processes for ``tpusim run``: each runs one point at a time, dies with the run, and can be stopped alone.

A pool of its own rather than ``concurrent.futures``, whose pool cannot stop one running task, and whose workers
on Ctrl-C either hang the shutdown or print tracebacks, and outlive a parent that is killed. Here each worker:

- ignores SIGINT: Ctrl-C reaches the whole process group, and the parent, which decides what an interrupt means,
  stops the workers itself;
- dies with its parent (``engine.lifetime.die_with``: the kernel's parent-death signal on Linux, a watchdog of
  ``os.getppid()`` everywhere);
- talks to the parent over a pipe of its own, so a worker that is killed loses only the point it was running.

A point running longer than the timeout has its worker killed and replaced; its outcome is an error saying so,
marked ``stopped``. So is a point whose worker died on its own (killed by the system, crashed).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections import deque
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import ForkContext, SpawnContext
from multiprocessing.process import BaseProcess
from typing import Any

from tpusim.engine.lifetime import PARENT_POLL_S, die_with, ignore_interrupts
from tpusim.experiments.jobs import Done, Job, run_job

__all__ = ["PARENT_POLL_S", "run_pool", "stopped_outcome"]

Context = ForkContext | SpawnContext
_JOIN_S = 2.0
"""How long a stopped worker may take to exit after SIGKILL before it is left to the system (it always dies)."""


def stopped_outcome(error: str) -> dict[str, Any]:
    """The outcome of a point that was stopped before it finished: no result, ``error`` saying why."""
    return {"result": {}, "error": error, "stopped": True}


def _worker(connection: Connection, parent: int, cache: str | None) -> None:
    """A worker's life: run each job the parent sends, send back (index, outcome, wall seconds) or the failure."""
    ignore_interrupts()
    die_with(parent)
    while True:
        try:
            job = connection.recv()
        except EOFError:  # the parent closed its end: nothing more to do
            return
        index, point = job
        try:
            reply: tuple[str, Any] = ("done", run_job(index, point, cache))
        except Exception as error:  # a bug in a point: the parent raises it, as if the point had run there
            reply = ("failed", error)
        try:
            connection.send(reply)
        except (TypeError, ValueError, AttributeError):  # an exception that does not pickle: its text does
            connection.send(("failed", RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")))


@dataclass
class _Slot:
    """One worker process, the parent's end of its pipe and the job it runs (None when idle)."""

    process: BaseProcess
    connection: Connection
    job: Job | None = None
    started: float = 0.0

    def give(self, job: Job) -> None:
        self.connection.send(job)
        self.job, self.started = job, time.monotonic()

    def stop(self) -> None:
        """Kill the worker at once (what it was running is lost) and reap it."""
        self.process.kill()
        self.process.join(_JOIN_S)
        self.connection.close()


def _context() -> Context:
    """fork where the system has it (workers start at once, with tpusim already imported), spawn elsewhere."""
    if "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _start(context: Context, cache: str | None) -> _Slot:
    ours, theirs = context.Pipe(duplex=True)
    process = context.Process(target=_worker, args=(theirs, os.getpid(), cache), name="tpusim-worker",
                              daemon=True)
    process.start()
    theirs.close()
    return _Slot(process, ours)


def _replace(slot: _Slot, context: Context, cache: str | None, queue: deque[Job]) -> _Slot:
    """Kill ``slot``'s worker; a new worker takes the next queued job, if there is one."""
    slot.stop()
    slot.job = None
    if not queue:
        return slot
    fresh = _start(context, cache)
    fresh.give(queue.popleft())
    return fresh


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    return f"exit status {code}"


def run_pool(jobs: Sequence[Job], workers: int, cache: str | None = None,
             timeout: float | None = None) -> Generator[Done, None, None]:
    """Run ``jobs`` on ``workers`` worker processes, yielding (index, outcome, wall seconds) as points finish; a
    point running longer than ``timeout`` seconds is stopped (its worker replaced) and yields a stopped outcome.

    However the generator ends (exhausted, closed, an exception or an interrupt in the caller), every worker is
    killed before it returns."""
    context = _context()
    queue = deque(jobs)
    slots: list[_Slot] = []
    try:
        for _ in range(min(workers, len(queue))):
            slots.append(_start(context, cache))
        for slot in slots:
            slot.give(queue.popleft())
        while any(slot.job is not None for slot in slots):
            busy = [slot for slot in slots if slot.job is not None]
            wait_s = None
            if timeout is not None:
                wait_s = max(0.0, min(slot.started for slot in busy) + timeout - time.monotonic())
            ready = wait([slot.connection for slot in busy] + [slot.process.sentinel for slot in busy], wait_s)
            now = time.monotonic()
            for number, slot in enumerate(slots):
                job = slot.job
                if job is None:
                    continue
                if slot.connection in ready or slot.process.sentinel in ready:
                    try:
                        kind, value = slot.connection.recv()
                    except (EOFError, OSError):  # the worker died without a word: killed by the system, crashed
                        slots[number] = _replace(slot, context, cache, queue)
                        yield job[0], stopped_outcome(f"the worker process running this point died "
                                                      f"({_exit_text(slot.process.exitcode)})"), now - slot.started
                        continue
                    if kind == "failed":
                        raise value
                    slot.job = None
                    yield value
                    if queue:
                        slot.give(queue.popleft())
                elif timeout is not None and now - slot.started >= timeout:
                    slots[number] = _replace(slot, context, cache, queue)
                    outcome = stopped_outcome(f"timed out: stopped after --timeout {timeout:g} s")
                    yield job[0], outcome, now - slot.started
    finally:
        for slot in slots:
            slot.stop()
