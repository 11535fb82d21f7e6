"""Small input files the reliability tests write (one tiny GeMM point, runs in milliseconds), and the wait for a
real process to reach a state."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], what: str, *, deadline_s: float, poll_s: float) -> None:
    """Poll ``condition`` every ``poll_s`` until it holds; fail naming ``what`` after ``deadline_s`` (a liveness
    bound, not a timing assertion)."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {deadline_s} s")
        time.sleep(poll_s)

TINY_GEMM_POINT = """\
point:
  kind: gemm
  hardware: meshslice-tpu-fit
  mesh: 2x2
  algorithm: summa
  dataflow: os
  m: 64
  n: 64
  k: 64
"""
"""The ``point:`` section of an experiment; prefix ``name: ...`` and append a ``sweep:`` as needed."""
