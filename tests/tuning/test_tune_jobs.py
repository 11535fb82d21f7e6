"""``tune --jobs N``: the simulations run on N worker processes and the result is the one of a single process,
to the bit; bad counts are one line and exit 2; more jobs than CPUs run one per CPU, with a note."""

from __future__ import annotations

import json

import pytest

from tests.tune_specs import tune_for
from tpusim import api
from tpusim.cli.main import main
from tpusim.errors import UserError
from tpusim.gemm.registry import get_algorithm
from tpusim.hardware import load_hardware
from tpusim.model.registry import load_model
from tpusim.tuning import CostCache, tune

ARGV = ["tune", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "16", "--ignore-memory"]


@pytest.mark.slow
def test_two_worker_processes_give_the_result_of_one() -> None:
    spec = tune_for(model=load_model("gpt3-175b"), hardware=load_hardware("meshslice-sim"), chips=16,
                    ignore_memory=True)
    alone, shared = CostCache(), CostCache()
    one = tune(spec, cache=alone, jobs=1)
    two = tune(spec, cache=shared, jobs=2)
    assert json.dumps(two.to_dict()) == json.dumps(one.to_dict())
    assert one.simulated > 0 and alone.simulations > 0
    # every GeMM the search simulated came from the workers: none was simulated in this process
    assert shared.simulations == 0


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "two"])
def test_a_bad_job_count_is_one_line_and_exit_2(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGV, "--jobs", value]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"--jobs {value!r} must be an integer >= 1\n"


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_the_api_refuses_a_bad_job_count(value: object) -> None:
    with pytest.raises(UserError, match=r"^jobs .* must be an integer >= 1$"):
        api.tune(model="gpt3-175b", hardware="meshslice-sim", chips=16, ignore_memory=True, jobs=value)


@pytest.mark.slow
def test_more_jobs_than_cpus_run_one_per_cpu_with_a_note(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert main([*ARGV, "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert main([*ARGV, "--json", "--jobs", "3"]) == 0
    capped = json.loads(capsys.readouterr().out)
    assert capped["notes"] == [*alone["notes"], "--jobs 3 is more than this machine's 1 CPUs; ran 1 worker processes"]
    assert {**capped, "notes": alone["notes"]} == alone


def test_closing_the_pool_does_not_wait_for_a_step_the_search_gave_up() -> None:
    """A finalist's step sent to a worker ahead of time and then pruned by the bound cannot be cancelled once it
    runs; the pool used to wait for it at close (``tune --chips 4096 --jobs 2``: 112 s against 47 s with one
    process, for a 25 s full-fidelity step nobody needed). Now close ends the workers: the step never completes."""
    from concurrent.futures import CancelledError
    from concurrent.futures.process import BrokenProcessPool

    from tpusim.collectives.factory import network_for, place_mesh
    from tpusim.model.step import StepSpec
    from tpusim.tuning.parallel import SimulationPool
    from tpusim.vocabulary import Fidelity

    hardware = load_hardware("tpuv4")
    # about a minute of full-fidelity simulation: far longer than submitting it and closing the pool
    spec = StepSpec(load_model("llama2-7b"), get_algorithm("wang"), 16, fidelity=Fidelity.FULL, extrapolate=False)
    pool = SimulationPool(2, None)
    future = pool.step(spec, network_for(hardware, place_mesh(hardware, 4, 4)), [])
    pool.close()
    assert future.done()
    with pytest.raises((BrokenProcessPool, CancelledError)):  # ended while it ran, or before a worker took it
        future.result()
