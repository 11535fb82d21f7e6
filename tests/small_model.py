"""A two-layer decoder model file for tests that need a custom model (loads and simulates in well under a second)."""

from __future__ import annotations

SMALL_MODEL_YAML = """name: small-test
description: a 2-layer decoder for tests, hidden 1024
layers: 2
hidden: 1024
heads: 16
head_dim: 64
ffn: 3072
sequence: 512
"""
