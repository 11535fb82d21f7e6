"""Stop signals held back while work that must not be cut midway runs (``engine.signals.interrupts_deferred``)."""

from __future__ import annotations

import os
import signal

import pytest

from tpusim.engine.signals import Interrupted, interrupts_deferred, interrupts_raised


def test_a_signal_in_the_block_is_raised_as_it_ends() -> None:
    finished = False
    with pytest.raises(Interrupted) as stopped, interrupts_raised(), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        finished = True  # reached: the signal was only recorded
    assert finished and stopped.value.exit_code == 130


def test_a_failure_after_a_signal_is_taken_as_stopped_by_it() -> None:
    with pytest.raises(Interrupted) as stopped, interrupts_raised(), interrupts_deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        raise EOFError("the forkserver died of the same signal")
    assert stopped.value.exit_code == 143 and isinstance(stopped.value.__cause__, EOFError)


def test_a_failure_without_a_signal_is_its_own() -> None:
    with pytest.raises(EOFError), interrupts_raised(), interrupts_deferred():
        raise EOFError("unrelated")


def test_a_block_left_by_an_interrupt_defers_nothing_after_it() -> None:
    with pytest.raises(Interrupted), interrupts_raised():
        with pytest.raises(KeyboardInterrupt), interrupts_deferred():
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGINT)  # outside any deferral: acts at once
        pytest.fail("the signal was deferred after its block had ended")
