"""Host offload of activations (docs/workloads.md#memory): the host link's busy time, the copies' schedule against
a hand-computed figure, offload against saving in HBM, the memory estimate and the refusal without a host link."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.panels import plan_panel_bytes
from tpusim import api
from tpusim.collectives.factory import network_for
from tpusim.collectives.network import place_mesh
from tpusim.config import HostSpec, PhysicalProfile, TransformerModel
from tpusim.engine.host import HostDirection, HostLinks
from tpusim.errors import InfeasibleError
from tpusim.gemm.registry import get_algorithm
from tpusim.hardware import load_hardware
from tpusim.hardware.profiles import scaled_profile
from tpusim.model.memory import estimate_memory
from tpusim.model.plan import plan_block, plan_step
from tpusim.model.remat import HostCopy
from tpusim.model.step import StepResult, StepSpec, simulate_step
from tpusim.vocabulary import Activation, Prefetch, Recompute

TINY = TransformerModel(name="tiny", description="test model", layers=6, hidden=512, heads=8, head_dim=64,
                        ffn=2048, sequence=64)
BATCH = 4
TOKENS = BATCH * TINY.sequence
INPUT_AND_FF1 = frozenset({Activation.DECODER_LAYER_INPUT, Activation.MLPWI})
INPUT = frozenset({Activation.DECODER_LAYER_INPUT})


def _spec(hardware: PhysicalProfile, **fields: object) -> StepSpec:
    spec = StepSpec(TINY, get_algorithm("collective"), BATCH, recompute=Recompute.CUSTOM, prefetch=hardware.prefetch)
    return replace(spec, **fields)  # type: ignore[arg-type]


def _host(hardware: object) -> float:
    assert isinstance(hardware, PhysicalProfile) and hardware.host is not None
    return hardware.host.link_bandwidth


def _with_host(hardware: object, factor: float, dma: float = 1.0) -> PhysicalProfile:
    """``hardware`` with its host link ``factor`` times as fast (and its DMA's HBM traffic scaled by ``dma``)."""
    scaled = scaled_profile(hardware, dma=dma)  # type: ignore[arg-type]
    assert isinstance(scaled, PhysicalProfile)
    return scaled.model_copy(update={"host": HostSpec(link_bandwidth=_host(scaled) * factor)})


def _host_s(result: StepResult) -> tuple[float, float, float]:
    moved = result.switches["host_transfer_s"]
    return moved["to_host"], moved["from_host"], result.switches["host_wait_s"]


def test_the_host_link_queues_copies_first_come_first_served_each_way() -> None:
    links = HostLinks(bandwidth=10.0)
    assert links.reserve(3, HostDirection.TO_HOST, 20.0, 0.0) == (0.0, 2.0)
    assert links.reserve(3, HostDirection.TO_HOST, 10.0, 1.0) == (2.0, 3.0)  # behind the first copy
    assert links.reserve(3, HostDirection.FROM_HOST, 10.0, 1.0) == (1.0, 2.0)  # the other direction is free
    assert links.reserve(4, HostDirection.TO_HOST, 10.0, 1.0) == (1.0, 2.0)  # another chip's link
    assert (links.busy(3, HostDirection.TO_HOST), links.bytes(3, HostDirection.TO_HOST)) == (3.0, 30.0)
    assert links.busy(5, HostDirection.FROM_HOST) == 0.0


def test_the_physical_profiles_have_a_host_link_and_the_calibrated_ones_none(tmp_path: Path) -> None:
    assert {name: _host(load_hardware(name)) for name in ("tpuv4", "tpuv4-wire", "tpuv5e", "tpuv5p", "tpuv6e")} == {
        "tpuv4": 15.75e9, "tpuv4-wire": 15.75e9, "tpuv5e": 31.5e9, "tpuv5p": 31.5e9, "tpuv6e": 63e9}
    for name in ("meshslice-sim", "meshslice-tpu-fit"):
        assert not isinstance(load_hardware(name), PhysicalProfile)
    # the assumed bandwidths are swept with a derived profile
    (tmp_path / "slow-host.yaml").write_text("name: slow-host\ndescription: tpuv5e with a slower host link\n"
                                             "base: tpuv5e\nkind: physical\nhost:\n  link_bandwidth: 8 GB/s\n")
    derived = load_hardware(str(tmp_path / "slow-host.yaml"))
    assert _host(derived) == 8e9 and derived.chip == load_hardware("tpuv5e").chip


def test_each_offloaded_tensor_leaves_after_its_producer_and_returns_before_its_first_reader() -> None:
    hardware = load_hardware("tpuv4")
    assert isinstance(hardware, PhysicalProfile)
    plan = plan_step(_spec(hardware, remat_offload=INPUT_AND_FF1), (2, 2))
    # per chip of the 2x2 mesh: a quarter of the [tokens, hidden] input and of the [tokens, ffn] FF1 output, bf16
    assert plan.offload == (HostCopy("x0", TOKENS * 512 * 2 / 4, None, "recompute.ln1.norm"),
                            HostCopy("u", TOKENS * 2048 * 2 / 4, "ff1.fwd", "recompute.gelu"))
    assert plan_step(_spec(hardware, remat_save=INPUT_AND_FF1), (2, 2)).offload == ()


@pytest.mark.slow
def test_host_link_busy_time_is_the_offloaded_bytes_over_the_bandwidth_each_way() -> None:
    hardware = load_hardware("tpuv4")
    assert isinstance(hardware, PhysicalProfile)
    result = simulate_step(_spec(hardware, remat_offload=INPUT_AND_FF1),
                           network_for(hardware, place_mesh(hardware, 2, 2)))
    per_layer = TOKENS * (512 + 2048) * 2 / 4 / 15.75e9  # x0 and u, a quarter of each per chip
    to_host, from_host, _ = _host_s(result)
    assert to_host == pytest.approx(TINY.layers * per_layer, rel=1e-9)
    assert from_host == pytest.approx(TINY.layers * per_layer, rel=1e-9)
    assert result.switches["remat_offload"] == ["decoder_layer_input", "mlpwi"]
    every = simulate_step(_spec(hardware, remat_offload=INPUT_AND_FF1, extrapolate=False),
                          network_for(hardware, place_mesh(hardware, 2, 2)))
    assert (result.simulated_layers, every.simulated_layers) == ([2, 3], [6])
    assert result.step_time_s == pytest.approx(every.step_time_s, rel=1e-9)  # the schedule repeats per layer
    assert _host_s(result) == pytest.approx(_host_s(every), rel=1e-9)


@pytest.mark.slow
def test_micro_batches_each_move_their_own_activations() -> None:
    hardware = load_hardware("tpuv4")
    assert isinstance(hardware, PhysicalProfile)
    result = simulate_step(_spec(hardware, remat_offload=INPUT_AND_FF1, microbatches=2),
                           network_for(hardware, place_mesh(hardware, 2, 2)))
    # two micro-batches of half the tokens: the same bytes over the step as one batch
    whole = TINY.layers * TOKENS * (512 + 2048) * 2 / 4 / 15.75e9
    assert _host_s(result)[:2] == pytest.approx((whole, whole), rel=1e-9)


@pytest.mark.slow
def test_with_a_huge_host_bandwidth_offload_times_as_saving_in_hbm() -> None:
    # DMA's HBM traffic off: the copies' bytes would otherwise still slow the compute they overlap
    hardware = _with_host(load_hardware("tpuv4"), 1e9, dma=0)
    assert isinstance(hardware, PhysicalProfile)
    mapping = place_mesh(hardware, 2, 2)
    saved = simulate_step(_spec(hardware, remat_save=INPUT_AND_FF1), network_for(hardware, mapping))
    offloaded = simulate_step(_spec(hardware, remat_offload=INPUT_AND_FF1), network_for(hardware, mapping))
    assert offloaded.step_time_s == pytest.approx(saved.step_time_s, rel=1e-9)
    assert "host_wait_s" not in saved.switches


def test_a_tiny_host_bandwidth_makes_the_step_link_bound_as_computed_by_hand() -> None:
    """One chip, the layer input offloaded, a copy X far longer than a layer's forward F or backward B.

    Copies out queue back to back from t = 0: layer l's is on the host at (l + 1) X. As the backward pass starts,
    layers L - 1 and L - 2 are fetched, each once on the host: back at (L + 1) X and L X. Layer L - 1 runs its
    backward from (L + 1) X, then L - 2 at once; from there layer l waits for its copy, issued as the layer above
    started its backward, and ends at (2L - 1 - l) X + 2B: the step is (2L - 1) X + 2B.
    """
    hardware = _with_host(load_hardware("tpuv4"), 1e-3, dma=0)
    assert isinstance(hardware, PhysicalProfile)
    mapping = place_mesh(hardware, 1, 1)
    saved = simulate_step(_spec(hardware, remat_save=INPUT), network_for(hardware, mapping))
    backward = {op.name for op in plan_block(_spec(hardware, remat_save=INPUT), (1, 1))[1]}
    b = sum(row["time_s"] for row in saved.per_layer if row["op"] in backward)
    f = saved.step_time_s / TINY.layers - b
    x = TOKENS * 512 * 2 / _host(hardware)
    assert x > 100 * (f + b)
    layers = TINY.layers
    for extrapolate in (True, False):
        offloaded = simulate_step(_spec(hardware, remat_offload=INPUT, extrapolate=extrapolate),
                                  network_for(hardware, mapping))
        assert offloaded.step_time_s == pytest.approx((2 * layers - 1) * x + 2 * b, rel=1e-9)
        # the wait is the step less its compute, which saving the input in HBM runs without a gap
        assert _host_s(offloaded) == pytest.approx((layers * x, layers * x, offloaded.step_time_s - saved.step_time_s),
                                                    rel=1e-9)
    # never the symmetric sum of ops, which cannot see a copy that crosses op boundaries
    assert offloaded.fidelity == "symmetric" and not any("each distinct op" in note for note in offloaded.notes)


@pytest.mark.slow
def test_a_slower_host_link_never_speeds_the_step() -> None:
    base = load_hardware("tpuv4")
    times = []
    for factor in (1e3, 1.0, 1e-1, 1e-2):
        hardware = _with_host(base, factor)
        assert isinstance(hardware, PhysicalProfile)
        times.append(simulate_step(_spec(hardware, remat_offload=INPUT_AND_FF1),
                                   network_for(hardware, place_mesh(hardware, 2, 2))).step_time_s)
    assert times == sorted(times) and times[-1] > times[0]


def test_the_copies_dma_slows_the_compute_it_overlaps_in_hbm() -> None:
    hardware = load_hardware("tpuv4")
    assert isinstance(hardware, PhysicalProfile) and hardware.chip.dma_hbm_traffic == 1
    mapping = place_mesh(hardware, 1, 1)
    saved = simulate_step(_spec(hardware, remat_save=INPUT_AND_FF1), network_for(hardware, mapping))
    offloaded = simulate_step(_spec(hardware, remat_offload=INPUT_AND_FF1), network_for(hardware, mapping))
    assert saved.hbm_stall_s == 0.0 and offloaded.hbm_stall_s > 0.0


@pytest.mark.slow
def test_the_memory_estimate_moves_the_offloaded_bytes_to_the_host() -> None:
    hardware = load_hardware("tpuv4")
    chips = 4
    saved = estimate_memory(TINY, chips, BATCH, Recompute.CUSTOM, hardware.chip.hbm_capacity, remat_save=INPUT_AND_FF1)
    offloaded = estimate_memory(TINY, chips, BATCH, Recompute.CUSTOM, hardware.chip.hbm_capacity,
                                remat_offload=INPUT_AND_FF1)
    moved = TOKENS * (512 + 2048) * 2 * TINY.layers / chips
    assert (saved.activations_bytes, saved.host_bytes) == (moved, 0.0)
    assert (offloaded.activations_bytes, offloaded.host_bytes) == (0.0, moved)
    result = api.step(model=TINY, hardware="tpuv4", mesh="2x2", algorithm="collective", batch=BATCH,
                      recompute="custom", remat_offload=["decoder_layer_input", "mlpwi"])
    # the step adds the GeMM panels of its plan (tests/panels.py)
    panels = plan_panel_bytes(TINY, "collective", BATCH, (2, 2), Prefetch.PREVIOUS_GEMM, Recompute.CUSTOM,
                              remat_offload=INPUT_AND_FF1)
    assert result.memory_bytes_per_chip == pytest.approx(offloaded.total_bytes + panels, rel=1e-12)


def test_offload_is_refused_on_a_profile_without_a_host_link() -> None:
    with pytest.raises(InfeasibleError) as caught:
        api.step(model=TINY, hardware="meshslice-sim", mesh="2x2", algorithm="collective", batch=BATCH,
                 recompute="custom", remat_offload=["mlpwi"])
    assert caught.value.message == ("remat_offload mlpwi: hardware profile 'meshslice-sim' has no host link "
                                    "(host.link_bandwidth) to offload over; use a physical profile such as 'tpuv4', "
                                    "or save the activations (remat_save)")
    assert caught.value.exit_code == 2


@pytest.mark.slow
def test_the_step_command_reports_the_host_link(capsys: pytest.CaptureFixture[str]) -> None:
    from tpusim.cli.main import main
    from tpusim.units import format_time

    assert main(["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--mesh", "32x8", "--algorithm",
                 "collective", "--recompute", "custom", "--remat-save", "qkv_proj,out_proj", "--remat-offload",
                 "decoder_layer_input,mlpwi", "--ignore-memory"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  host link")]
    # 96 layers of the layer input (2h bytes per token) and the FF1 output (2f), 2048 x 256 tokens over 256 chips
    each_way = 96 * 2048 * 256 * (2 * 12288 + 2 * 4 * 12288) / 256 / 15.75e9
    assert len(lines) == 1
    assert lines[0].startswith(f"  host link     {format_time(each_way)} out, {format_time(each_way)} back, ")
    assert lines[0].endswith(" waited (decoder_layer_input, mlpwi)")
