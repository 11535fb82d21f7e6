"""The tuner: pruned search against exhaustive search, against the authors' pick, memory, separability."""

from __future__ import annotations

import pytest

from tests.tune_specs import tune_for
from tpusim.collectives.factory import network_for
from tpusim.collectives.network import place_mesh
from tpusim.config import TransformerModel
from tpusim.errors import InfeasibleError
from tpusim.gemm.registry import get_algorithm
from tpusim.hardware import load_hardware
from tpusim.model.registry import load_model
from tpusim.model.step import StepSpec, simulate_step
from tpusim.tuning import CostCache, TuneResult, TuneSpec, tune
from tpusim.tuning.layer_costs import non_ff_time, non_ff_twin
from tpusim.vocabulary import Dataflow, Fidelity, Prefetch

OS, LS = Dataflow.OS, Dataflow.LS
# Hidden size twice the tokens of a 16-chip batch: the weights are the largest matrices, so RS competes.
WIDE = TransformerModel(name="wide", description="test model", layers=4, hidden=2048, heads=16, head_dim=128,
                        ffn=8192, sequence=64)


def pair(request: TuneSpec) -> tuple[TuneResult, TuneResult]:
    """The pruned and the exhaustive answer, sharing one cost cache."""
    cache = CostCache()
    return tune(request, cache), tune(request.model_copy(update={"exhaustive": True}), cache)


@pytest.mark.parametrize(("model", "hardware", "chips"), [
    ("gpt3-175b", "meshslice-sim", 32),
    ("megatron-nlg-530b-ms", "meshslice-tpu-fit", 64),
])
@pytest.mark.slow
def test_default_lands_within_one_percent_of_exhaustive(model: str, hardware: str, chips: int) -> None:
    # RS never pays for these models (docs/workloads.md#the-autotuner); leaving it out keeps the exhaustive run short
    request = tune_for(model=load_model(model), hardware=load_hardware(hardware), chips=chips, ignore_memory=True,
                       dataflows=(OS, LS))
    default, exhaustive = pair(request)
    assert default.best.step_time_s <= exhaustive.best.step_time_s * 1.01
    assert exhaustive.simulated == exhaustive.evaluated
    assert default.simulated < default.evaluated == exhaustive.evaluated
    assert default.search_space == exhaustive.search_space > 10_000


@pytest.mark.slow
def test_rs_layers_pair_up_with_a_transposed_partner() -> None:
    request = tune_for(model=WIDE, hardware=load_hardware("meshslice-tpu-fit"), chips=16, ignore_memory=True)
    default, exhaustive = pair(request)
    assert default.best.step_time_s <= exhaustive.best.step_time_s * 1.01
    for choice in (default.best, exhaustive.best):
        flag = False
        for index, (dataflow, transpose) in enumerate(zip(choice.dataflows, choice.transposes, strict=True)):
            assert transpose == flag  # each layer runs in its input's layout
            flag = flag != (dataflow == "rs")
            if index in (1, 3):
                assert flag is False  # both residual adds see the block's own layout
    assert "rs" in exhaustive.best.dataflows
    assert True in exhaustive.best.transposes
    # the step model times the transposed layers exactly as the search priced them
    assert exhaustive.best.estimate_step_s == pytest.approx(exhaustive.best.step_time_s, rel=1e-9)


@pytest.mark.parametrize(("model", "slices"), [
    ("gpt3-175b", (16, 8, 24, 24)),
    ("megatron-nlg-530b-ms", (20, 10, 20, 20)),
])
@pytest.mark.slow
def test_never_slower_than_the_authors_pick(model: str, slices: tuple[int, ...]) -> None:
    hardware, loaded = load_hardware("meshslice-tpu-fit"), load_model(model)
    authors = StepSpec(loaded, get_algorithm("meshslice"), 256, slices=slices, dataflows=(OS, LS, OS, LS),
                       transposes=(False,) * 4, prefetch=Prefetch.IDEAL, fidelity=Fidelity.AUTO)
    theirs = simulate_step(authors, network_for(hardware, place_mesh(hardware, 32, 8)))
    ours = tune(tune_for(model=loaded, hardware=hardware, chips=256, ignore_memory=True))
    assert ours.best.step_time_s <= theirs.step_time_s
    assert ours.runner_up is not None and ours.runner_up.mesh != ours.best.mesh
    assert ours.best.step_time_s <= ours.runner_up.step_time_s


@pytest.mark.slow
def test_the_search_estimate_is_the_simulated_step() -> None:
    # on a calibrated profile ops run back to back and twins equal the DES: the sum is the step
    result = tune(tune_for(model=load_model("gpt3-175b"), hardware=load_hardware("meshslice-tpu-fit"), chips=96,
                           ignore_memory=True))
    for choice in (result.best, result.runner_up):
        assert choice is not None
        assert choice.estimate_step_s == pytest.approx(choice.step_time_s, rel=1e-9)
    considered = {m.mesh: m.status for m in result.meshes}
    assert considered["12x8"] in ("priced", "simulated")  # not only powers of two
    assert len(considered) == 12


@pytest.mark.parametrize("hardware", ["meshslice-sim", "meshslice-tpu-fit"])
@pytest.mark.parametrize("mesh", [(8, 4), (2, 16)])
def test_non_ff_twin_equals_its_simulation(hardware: str, mesh: tuple[int, int]) -> None:
    profile = load_hardware(hardware)
    mapping = place_mesh(profile, *mesh)
    spec = StepSpec(load_model("gpt3-175b"), get_algorithm("meshslice"), 32)
    network = network_for(profile, mapping)
    assert non_ff_twin(spec, network) == pytest.approx(non_ff_time(spec, network, Fidelity.AUTO), rel=1e-9)


def test_nothing_fits_names_the_shortfall() -> None:
    request = tune_for(model=load_model("gpt3-175b"), hardware=load_hardware("meshslice-sim"), chips=32)
    with pytest.raises(InfeasibleError) as caught:
        tune(request)
    assert caught.value.message == (
        "gpt3-175b on 32 chips (batch 32, recompute auto) does not fit in HBM: the smallest shortfall is 65.1 GB per "
        "chip (98.1 GB of 33.0 GB with recompute full, 1 micro-batch)")
    assert caught.value.suggestion == ("the weights, gradients and optimizer state alone take 87.0 GB per chip; use "
                                       "more chips, or --ignore-memory to time it anyway")


@pytest.mark.slow
def test_memory_that_fits_is_kept() -> None:
    result = tune(tune_for(model=WIDE, hardware=load_hardware("meshslice-sim"), chips=16, dataflows=(OS, LS)))
    assert result.best.memory_feasible
    assert not any("memory ignored" in note for note in result.notes)
