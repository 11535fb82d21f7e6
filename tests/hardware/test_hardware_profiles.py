"""The hardware profile registry: shipped profiles, inheritance, error reporting, scaled variants."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tpusim.config import CalibratedProfile, HardwareProfile, PhysicalProfile
from tpusim.config.catalog import EXPERIMENTS, HARDWARE, MODELS
from tpusim.errors import ConfigError, UnknownNameError, UserError
from tpusim.hardware import hardware_names, list_hardware, load_hardware, scaled_profile

ROOT = Path(__file__).resolve().parents[2]
F_EMULATOR = 242 * 1024**4

# A complete physical profile; tests write variants of it to temporary files.
PHYSICAL = """\
name: {name}
description: test profile
kind: physical
chip:
  peak_flops: 1e12
  tensorcores: 1
  mxus_per_core: 1
  mxu_dim: 128
  hbm_capacity: 1e9
  hbm_bandwidth: 1e12
  gemm_model: roofline
ici:
  link_bandwidth: {bandwidth}
  hop_latency: 1e-6
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def _config_error(target: str | Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_hardware(str(target))
    assert isinstance(info.value, UserError)
    assert info.value.exit_code == 2
    return info.value


# ---- the shipped profiles


def test_named_files_come_from_the_top_level_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """From a checkout (this test's), the shipped files are the source tree's configs/ and experiments/."""
    monkeypatch.delenv("TPUSIM_CONFIG_DIR", raising=False)
    assert [c.root().resolve() for c in (HARDWARE, MODELS, EXPERIMENTS)] == [
        ROOT / "configs" / "hardware", ROOT / "configs" / "models", ROOT / "experiments"]


@pytest.mark.parametrize("make", [lambda root: None, lambda root: (root / "hardware").mkdir()],
                         ids=["missing", "empty"])
def test_a_missing_or_empty_profile_folder_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             make) -> None:  # type: ignore[no-untyped-def]
    make(tmp_path)
    monkeypatch.setenv("TPUSIM_CONFIG_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as info:
        hardware_names()
    assert str(tmp_path / "hardware") in info.value.message
    assert f"TPUSIM_CONFIG_DIR={str(tmp_path)!r}" in info.value.message


def test_registered_names() -> None:
    assert hardware_names() == [
        "meshslice-sim", "meshslice-tpu-fit", "tpuv4", "tpuv4-wire", "tpuv5e", "tpuv5p", "tpuv6e"]


@pytest.mark.slow
def test_every_yaml_in_configs_hardware_loads() -> None:
    files = sorted((ROOT / "configs" / "hardware").glob("*.yaml"))
    assert files
    for path in files:
        by_path = load_hardware(str(path))
        assert by_path.name == path.stem
        assert load_hardware(path.stem) == by_path
    assert [profile.name for profile in list_hardware()] == sorted(path.stem for path in files)


def test_tpuv4_values() -> None:
    p = load_hardware("tpuv4")
    assert isinstance(p, PhysicalProfile)
    assert p.base is None
    assert p.chip.peak_flops == 275e12
    assert p.chip.peak_flops_informational is None
    assert (p.chip.tensorcores, p.chip.mxus_per_core, p.chip.mxu_dim) == (2, 4, 128)
    assert p.chip.hbm_capacity == 32 * 2**30
    assert p.chip.hbm_bandwidth == 1.2e12
    assert p.chip.gemm_model == "roofline"
    assert p.chip.accumulator_traffic is True
    assert p.ici.link_bandwidth == 45e9
    assert p.ici.hop_latency == 1e-6
    assert p.overlap_slowdown == 1.0
    # software costs from the authors' v4-32 fit (docs/hardware-profiles.md#tpuv4)
    launch = p.ici.launch_overhead
    assert (launch.all_gather, launch.reduce_scatter, launch.send_recv, launch.shift) == (13e-6, 26e-6, 58e-6, 58e-6)
    assert p.ici.step_overhead + p.ici.hop_latency == pytest.approx(5e-6, rel=1e-12)  # the fit's lambda
    assert p.ici.reduction_passes == 3
    assert p.chip.op_overhead == 1e-6
    assert p.overlap_limits.describe() == {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 1}
    assert p.multi_axis == "dimensional"


def test_tpuv4_wire_is_tpuv4_without_software_costs() -> None:
    wire, tpu = load_hardware("tpuv4-wire"), load_hardware("tpuv4")
    assert isinstance(wire, PhysicalProfile) and isinstance(tpu, PhysicalProfile)
    assert wire.base == "tpuv4"
    assert {value for _, value in wire.ici.launch_overhead} == {0.0}
    assert (wire.ici.step_overhead, wire.ici.reduction_passes, wire.chip.op_overhead) == (0, 0, 0)
    assert wire.overlap_limits.describe() == {}
    # and at the peak rates: every efficiency 1 (docs/chip.md#achievable-rates)
    assert (wire.chip.mxu_efficiency, wire.chip.hbm_efficiency, wire.ici.link_efficiency) == (1, 1, 1)
    assert wire.ici.model_copy(update={"launch_overhead": tpu.ici.launch_overhead, "step_overhead": 4e-6,
                                       "reduction_passes": 3, "link_efficiency": tpu.ici.link_efficiency}) == tpu.ici
    assert wire.chip.model_copy(update={"op_overhead": 1e-6, "dma_hbm_traffic": 1.0,
                                        "mxu_efficiency": tpu.chip.mxu_efficiency,
                                        "hbm_efficiency": tpu.chip.hbm_efficiency}) == tpu.chip


def test_meshslice_tpu_fit_values() -> None:
    p = load_hardware("meshslice-tpu-fit")
    assert p.kind == "calibrated"
    assert p.base == "tpuv4"
    assert p.chip.gemm_model == "flops"
    assert p.chip.peak_flops == F_EMULATOR
    assert p.chip.peak_flops_informational == 249e12
    cal = p.calibration
    assert cal is not None
    assert cal.all_gather.step_latency == 5e-6
    assert cal.reduce_scatter.step_latency == 5e-6
    assert cal.send_recv.step_latency == 50e-6
    assert cal.all_gather.bandwidth == (27.472e9, 79.751e9)
    assert cal.reduce_scatter.bandwidth == (37.506e9, 63.167e9)
    assert cal.send_recv.bandwidth == (38.801e9, 35.224e9)
    assert cal.all_gather.launch_overhead == 13e-6
    assert cal.reduce_scatter.launch_overhead == 26e-6
    assert cal.send_recv.launch_overhead == 13e-6
    assert cal.send_recv_axis == 1


def test_meshslice_sim_values() -> None:
    p = load_hardware("meshslice-sim")
    assert p.kind == "calibrated"
    assert p.base == "tpuv4"
    assert p.chip.gemm_model == "flops"
    assert p.chip.peak_flops == F_EMULATOR
    assert p.chip.peak_flops_informational == 249e12
    cal = p.calibration
    assert cal is not None
    for op in (cal.all_gather, cal.reduce_scatter, cal.send_recv):
        assert op.step_latency == 6e-6
        assert op.launch_overhead == 100e-6
    assert cal.all_gather.bandwidth == (60e9, 60e9)
    assert cal.reduce_scatter.bandwidth == (50e9, 50e9)
    assert cal.send_recv.bandwidth == (38.801e9, 35.224e9)
    assert cal.send_recv_axis == 1


@pytest.mark.parametrize("name", ["meshslice-tpu-fit", "meshslice-sim"])
def test_meshslice_profiles_inherit_from_tpuv4(name: str) -> None:
    p, base = load_hardware(name), load_hardware("tpuv4")
    assert p.chip.hbm_capacity == 32 * 2**30
    assert p.chip.hbm_bandwidth == 1.2e12
    assert (p.chip.tensorcores, p.chip.mxus_per_core, p.chip.mxu_dim) == (2, 4, 128)
    assert isinstance(p, CalibratedProfile) and not hasattr(p, "ici")  # a calibrated network has no links
    # Both peaks are kept, distinct: timing uses the emulator's value, the printed bound is informational.
    assert p.chip.peak_flops != p.chip.peak_flops_informational
    assert p.description != base.description


def test_profiles_load_equal_and_frozen() -> None:
    p = load_hardware("tpuv4")
    assert load_hardware("tpuv4") == p  # loaded afresh each time: no module-level cache
    with pytest.raises(ValidationError):
        p.name = "other"  # type: ignore[misc]


# ---- unknown names


def test_unknown_name_lists_valid_names_and_suggests() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_hardware("tpu-v4")
    assert info.value.message == (
        "unknown hardware profile 'tpu-v4'; valid: meshslice-sim, meshslice-tpu-fit, tpuv4, tpuv4-wire, "
        "tpuv5e, tpuv5p, tpuv6e"
    )
    assert info.value.suggestion == "did you mean 'tpuv4'?"
    assert info.value.exit_code == 2


def test_missing_file_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    assert _config_error(path).message == (
        f"cannot read hardware profile file '{path}': No such file or directory"
    )


# ---- bad files


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad", "name: bad\ndescription: d\nchip: {peak_flops: 1e12\nici: 2\n")
    message = _config_error(path).message
    assert message.startswith(f"{path}:4: YAML syntax error: ")


def test_unknown_key_names_key_path_and_valid_keys(tmp_path: Path) -> None:
    text = PHYSICAL.format(name="typo", bandwidth="45e9").replace("link_bandwidth", "lnk_bandwidth")
    err = _config_error(_write(tmp_path, "typo", text))
    assert err.message == (
        f"{tmp_path / 'typo.yaml'}: unknown key 'lnk_bandwidth' at ici; "
        "valid keys: hop_latency, launch_overhead, link_bandwidth, link_efficiency, max_chunks, reduction_passes, "
        "step_overhead"
    )
    assert err.suggestion == "did you mean 'link_bandwidth'?"


def test_bandwidth_without_per_second_quotes_value(tmp_path: Path) -> None:
    path = _write(tmp_path, "gb", PHYSICAL.format(name="gb", bandwidth="45 GB"))
    message = _config_error(path).message
    assert message.startswith(f"{path}: ici.link_bandwidth: ")
    assert "'45 GB'" in message
    assert "'45 GB/s'" in message


@pytest.mark.parametrize("value", ["0", "-45e9", "-45 GB/s"])
def test_non_positive_bandwidth_rejected(tmp_path: Path, value: str) -> None:
    path = _write(tmp_path, "neg", PHYSICAL.format(name="neg", bandwidth=value))
    message = _config_error(path).message
    assert message.startswith(f"{path}: ici.link_bandwidth: bandwidth ")
    assert message.endswith("must be a finite number > 0")


def test_unit_strings_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path, "units", PHYSICAL.format(name="units", bandwidth="45 GB/s"))
    assert load_hardware(str(path)).ici.link_bandwidth == 45e9


def test_calibrated_without_calibration_rejected(tmp_path: Path) -> None:
    text = PHYSICAL.format(name="cal", bandwidth="45e9").replace("kind: physical", "kind: calibrated")
    path = _write(tmp_path, "cal", text)
    assert _config_error(path).message.startswith(f"{path}: unknown key 'ici' at top level; valid keys: base, ")


def test_child_of_physical_base_switching_to_calibrated_needs_calibration(tmp_path: Path) -> None:
    path = _write(tmp_path, "c", "base: tpuv4\nname: c\ndescription: d\nkind: calibrated\n")
    assert _config_error(path).message == f"{path}: missing required key 'calibration' at top level"


def test_unknown_base_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "child", "base: tpu-v4\nname: child\ndescription: d\n")
    err = _config_error(path)
    assert err.message == (
        f"{path}: base: unknown hardware profile 'tpu-v4'; valid: meshslice-sim, meshslice-tpu-fit, tpuv4, "
        "tpuv4-wire, tpuv5e, tpuv5p, tpuv6e"
    )
    assert err.suggestion == "did you mean 'tpuv4'?"


def test_base_cycle_rejected(tmp_path: Path) -> None:
    _write(tmp_path, "a", "base: b.yaml\nname: a\ndescription: d\n")
    _write(tmp_path, "b", "base: a.yaml\nname: b\ndescription: d\n")
    err = _config_error(tmp_path / "a.yaml")
    # Reported where the cycle closes: b's base points back to a.
    assert err.message == f"{tmp_path / 'b.yaml'}: base: inheritance cycle a -> b -> a"


def test_self_base_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "me", "base: me.yaml\nname: me\ndescription: d\n")
    assert _config_error(path).message == f"{path}: base: inheritance cycle me -> me"


def test_name_and_description_are_not_inherited(tmp_path: Path) -> None:
    path = _write(tmp_path, "anon", "base: tpuv4\ndescription: d\n")
    assert _config_error(path).message == f"{path}: missing required key 'name' at top level"


def test_error_in_a_base_names_the_base_file(tmp_path: Path) -> None:
    base = _write(tmp_path, "parent", PHYSICAL.format(name="parent", bandwidth="45 GB"))
    child = _write(tmp_path, "kid", "base: parent.yaml\nname: kid\ndescription: d\n")
    assert _config_error(child).message.startswith(f"{base}: ici.link_bandwidth: bandwidth '45 GB'")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path, "list", "- 1\n- 2\n")
    assert _config_error(path).message == f"{path}: a hardware profile must be a mapping of keys, got list"


# ---- inheritance and the registry folder


def test_deep_merge_overrides_only_named_keys(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "slow", "base: tpuv4\nname: slow\ndescription: d\nici: {link_bandwidth: 22.5 GB/s}\n"
    )
    p, base = load_hardware(str(path)), load_hardware("tpuv4")
    assert p.ici.link_bandwidth == 22.5e9
    assert p.ici.hop_latency == base.ici.hop_latency
    assert p.chip == base.chip
    assert p.base == "tpuv4"
    assert p.name == "slow"


def test_multi_level_inheritance(tmp_path: Path) -> None:
    _write(tmp_path, "mid", "base: meshslice-sim\nname: mid\ndescription: d\noverlap_slowdown: 1.5\n")
    leaf = _write(
        tmp_path, "leaf", "base: mid.yaml\nname: leaf\ndescription: d\n"
        "calibration: {all_gather: {step_latency: 1e-6}}\n"
    )
    p, sim = load_hardware(str(leaf)), load_hardware("meshslice-sim")
    assert p.overlap_slowdown == 1.5
    assert p.base == "mid.yaml"
    assert p.calibration is not None and sim.calibration is not None
    assert p.calibration.all_gather.step_latency == 1e-6
    assert p.calibration.all_gather.bandwidth == sim.calibration.all_gather.bandwidth
    assert p.calibration.all_gather.launch_overhead == sim.calibration.all_gather.launch_overhead
    assert p.calibration.reduce_scatter == sim.calibration.reduce_scatter


def test_config_dir_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "hardware"
    folder.mkdir()
    _write(folder, "mine", PHYSICAL.format(name="mine", bandwidth="10e9"))
    _write(folder, "kid", "base: mine\nname: kid\ndescription: d\nici: {hop_latency: 2e-6}\n")
    monkeypatch.setenv("TPUSIM_CONFIG_DIR", str(tmp_path))
    assert (HARDWARE.root(), MODELS.root(), EXPERIMENTS.root()) == (folder, tmp_path / "models",
                                                                   tmp_path / "experiments")
    assert hardware_names() == ["kid", "mine"]
    kid = load_hardware("kid")
    assert (kid.ici.link_bandwidth, kid.ici.hop_latency) == (10e9, 2e-6)
    with pytest.raises(UnknownNameError):
        load_hardware("tpuv4")


def test_registered_file_name_must_match_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "hardware"
    folder.mkdir()
    path = _write(folder, "alpha", PHYSICAL.format(name="beta", bandwidth="10e9"))
    monkeypatch.setenv("TPUSIM_CONFIG_DIR", str(tmp_path))
    assert _config_error("alpha").message == (
        f"{path.relative_to(tmp_path)}: name: 'beta' must match the file name 'alpha' of a named profile"
    )


# ---- scaled_profile


def _fields(profile: HardwareProfile) -> dict[str, object]:
    return profile.model_dump()


def test_scaled_profile_scales_named_fields_only() -> None:
    sim = load_hardware("meshslice-sim")
    before = sim.model_dump()
    scaled = scaled_profile(sim, bandwidth=0.5, latency=2.0, overhead=3.0, flops=0.25)
    assert sim.model_dump() == before
    cal, orig = scaled.calibration, sim.calibration
    assert cal is not None and orig is not None
    for op in ("all_gather", "reduce_scatter", "send_recv"):
        new, old = getattr(cal, op), getattr(orig, op)
        assert new.bandwidth == (old.bandwidth[0] * 0.5, old.bandwidth[1] * 0.5)
        assert new.step_latency == old.step_latency * 2.0
        assert new.launch_overhead == old.launch_overhead * 3.0
    # flops scales the achieved MXU rate; the nominal peak, which MFU is against, stays (docs/chip.md#achievable-rates)
    assert scaled.chip.peak_flops == F_EMULATOR
    assert scaled.chip.mxu_efficiency == 0.25
    assert scaled.name == "meshslice-sim[beta*0.5,lambda*2,alpha*3,flops*0.25]"
    # Everything else is unchanged.
    expected = dict(before)
    got = scaled.model_dump()
    for key in ("name", "chip", "calibration"):
        expected.pop(key)
        got.pop(key)
    assert got == expected
    chip_before, chip_after = sim.chip.model_dump(), scaled.chip.model_dump()
    chip_before.pop("mxu_efficiency")
    chip_after.pop("mxu_efficiency")
    assert chip_after == chip_before
    assert scaled.chip.peak_flops_informational == 249e12
    assert scaled.chip.hbm_bandwidth == 1.2e12
    assert cal.send_recv_axis == orig.send_recv_axis


def test_scaled_profile_single_factor_and_name() -> None:
    sim = load_hardware("meshslice-sim")
    scaled = scaled_profile(sim, bandwidth=0.5)
    assert scaled.name == "meshslice-sim[beta*0.5]"
    assert scaled.calibration is not None and sim.calibration is not None
    assert scaled.calibration.all_gather.bandwidth == (30e9, 30e9)
    assert scaled.calibration.all_gather.step_latency == sim.calibration.all_gather.step_latency
    assert scaled.chip == sim.chip


def test_scaled_physical_profile() -> None:
    tpu = load_hardware("tpuv4")
    scaled = scaled_profile(tpu, latency=0.0, bandwidth=2.0)
    assert isinstance(scaled, PhysicalProfile)
    assert scaled.ici.link_bandwidth == 90e9
    assert scaled.ici.hop_latency == 0.0
    assert scaled.ici.step_overhead == tpu.ici.step_overhead  # the handshake has its own factor
    assert scaled.name == "tpuv4[beta*2,lambda*0]"


def test_scaled_software_costs() -> None:
    tpu = load_hardware("tpuv4")
    scaled = scaled_profile(tpu, step=0.5, op=2.0, overhead=2.0)
    assert isinstance(scaled, PhysicalProfile) and isinstance(tpu, PhysicalProfile)
    assert scaled.ici.step_overhead == 2e-6
    assert scaled.chip.op_overhead == 2e-6
    assert scaled.ici.launch_overhead.all_gather == 26e-6
    assert scaled.name == "tpuv4[alpha*2,step*0.5,op*2]"


def test_handshake_factor_needs_a_physical_profile() -> None:
    with pytest.raises(ConfigError, match="scale factor step=2 applies to physical profiles; 'meshslice-sim'"):
        scaled_profile(load_hardware("meshslice-sim"), step=2.0)


def test_scaled_hbm_and_flops_scale_the_efficiencies() -> None:
    tpu = load_hardware("tpuv4")
    scaled = scaled_profile(tpu, hbm=0.5, flops=0.8)
    assert scaled.chip.hbm_efficiency == tpu.chip.hbm_efficiency * 0.5
    assert scaled.chip.mxu_efficiency == tpu.chip.mxu_efficiency * 0.8
    assert (scaled.chip.hbm_bandwidth, scaled.chip.peak_flops) == (tpu.chip.hbm_bandwidth, tpu.chip.peak_flops)
    assert scaled.name == "tpuv4[flops*0.8,hbm*0.5]"


@pytest.mark.slow
def test_a_slower_mxu_lowers_mfu() -> None:
    import yaml

    from tests.small_model import SMALL_MODEL_YAML
    from tpusim.config.requests import StepRequest
    from tpusim.experiments.runners import run_request

    fields = {"kind": "step", "hardware": "tpuv4", "model": yaml.safe_load(SMALL_MODEL_YAML), "mesh": "2x2",
              "algorithm": "collective", "batch": 8}
    base = run_request(StepRequest, fields)
    slow = run_request(StepRequest, {**fields, "scale": {"flops": 0.8}})
    assert slow.step_time_s > base.step_time_s
    assert slow.mfu < base.mfu
    # the same model FLOPs against the same nominal peak: MFU scales as 1 / step time
    assert slow.mfu * slow.step_time_s == pytest.approx(base.mfu * base.step_time_s, rel=1e-12)


def test_scaled_profile_identity_is_the_profile() -> None:
    tpu = load_hardware("tpuv4")
    assert scaled_profile(tpu) is tpu


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"bandwidth": 0.0}, "bandwidth=0.0 must be a finite number > 0"),
        ({"flops": -1.0}, "flops=-1.0 must be a finite number > 0"),
        ({"latency": -1.0}, "latency=-1.0 must be a finite number >= 0"),
        ({"overhead": float("inf")}, "overhead=inf must be a finite number >= 0"),
        ({"step": -0.5}, "step=-0.5 must be a finite number >= 0"),
        ({"op": float("nan")}, "op=nan must be a finite number >= 0"),
    ],
)
def test_scaled_profile_rejects_bad_factors(kwargs: dict[str, float], text: str) -> None:
    with pytest.raises(ConfigError, match=text):
        scaled_profile(load_hardware("tpuv4"), **kwargs)
