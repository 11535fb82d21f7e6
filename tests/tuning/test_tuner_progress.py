"""``tune`` reports the stages of its search to a progress callback; the command line prints them only on a
terminal, so piped output stays the result alone."""

from __future__ import annotations

import pytest

from tpusim.cli.main import main
from tpusim.config.requests import TuneRequest
from tpusim.experiments.runners import run_tune

REQUEST = {"model": "gpt3-175b", "hardware": "meshslice-sim", "chips": 256, "algorithm": "meshslice",
           "ignore_memory": True}


@pytest.mark.slow
def test_each_stage_of_the_search_is_reported_in_order() -> None:
    heard: list[str] = []
    result = run_tune(TuneRequest(**REQUEST), progress=heard.append)
    simulated = [m.mesh for m in result.meshes if m.status == "simulated"]
    priced = sum(1 for m in result.meshes if m.status != "skipped")
    assert heard[0] == f"pricing {priced} mesh(es) by their closed forms"
    steps = heard[1:-1]
    assert len(steps) == len(simulated)
    for number, line in enumerate(steps, start=1):
        assert line.startswith("simulating the best candidates of mesh ")
        assert line.endswith(f" ({number} of {len(simulated)})")
    assert sorted(line.split("mesh ")[1].split(" ")[0] for line in steps) == sorted(simulated)
    assert heard[-1] == "timing the best configuration and the runner-up as whole steps"


def test_piped_output_carries_no_progress(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["tune", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "256", "--algorithm",
            "meshslice", "--ignore-memory"]
    assert main(argv) == 0
    assert "tune: " not in capsys.readouterr().err
