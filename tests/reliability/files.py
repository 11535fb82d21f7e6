"""Small input files the reliability tests write: one tiny GeMM point (runs in milliseconds)."""

from __future__ import annotations

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
