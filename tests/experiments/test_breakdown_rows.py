"""The breakdown family re-simulates each tuned choice as a step: with every setting the tuner timed it with, the
step is the choice (the same step time)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpusim.config.requests import TuneRequest
from tpusim.experiments.families.comparisons import BREAKDOWN
from tpusim.experiments.runners import parse_request, run_request


def test_the_breakdown_step_is_the_tuned_choice(tmp_path: Path) -> None:
    model = tmp_path / "tiny.yaml"
    model.write_text("name: tiny\ndescription: a small transformer\nlayers: 2\nhidden: 512\nheads: 8\n"
                     "head_dim: 64\nffn: 2048\nsequence: 128\nvocabulary: 1000\n")
    # settings a step falls back to its own defaults for unless the family passes them on
    fields = {"kind": "tune", "model": str(model), "hardware": "tpuv4", "chips": 16, "topology": "torus:4x4",
              "dp": 1, "algorithm": "meshslice", "prefetch": "window", "prefetch_window": 2,
              "prefetch_budget": "64MB", "fidelity": "full", "bytes_per_param": 18, "ignore_memory": True}
    point = parse_request(TuneRequest, fields).model_dump(mode="json")
    result = run_request(TuneRequest, fields)
    rows = BREAKDOWN.table([{"point": point, "result": result.to_dict(), "error": None}])
    step = next(row for row in rows if row["part"] == "step")
    assert step["mesh"] == result.best.mesh
    assert step["time_s"] == pytest.approx(result.best.step_time_s, rel=1e-12)
