"""Validation rules of the hardware profile models (tpusim.config.hardware)."""

from __future__ import annotations

from typing import Any

import pytest

from tpusim.config import CalibratedProfile, Calibration, PhysicalProfile, ProfileDocument, validate
from tpusim.errors import ConfigError

OP = {"bandwidth": [1e9, 2e9], "step_latency": 1e-6, "launch_overhead": 2e-6}
CALIBRATION = {"all_gather": OP, "reduce_scatter": OP, "send_recv": OP}


def _calibrated(**changes: Any) -> dict[str, Any]:
    data = _profile(kind="calibrated", calibration=CALIBRATION)
    del data["ici"]
    data.update(changes)
    return data


def _profile(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "p",
        "description": "d",
        "kind": "physical",
        "chip": {
            "peak_flops": 1e12,
            "tensorcores": 1,
            "mxus_per_core": 1,
            "mxu_dim": 128,
            "hbm_capacity": "1 GiB",
            "hbm_bandwidth": "1 TB/s",
            "gemm_model": "roofline",
        },
        "ici": {"link_bandwidth": 1e9, "hop_latency": 1e-6},
    }
    data.update(changes)
    return data


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        validate(ProfileDocument, data, "hw.yaml")
    return info.value.message


def test_defaults() -> None:
    profile = validate(ProfileDocument, _profile(), "hw.yaml")
    assert isinstance(profile, PhysicalProfile)
    assert profile.base is None
    assert profile.prefetch == "previous-gemm"
    assert profile.overlap_slowdown == 1.0
    assert {value for _, value in profile.ici.launch_overhead} == {0.0}
    assert profile.overlap_limits.describe() == {}
    assert profile.multi_axis == "dimensional"
    assert profile.chip.accumulator_traffic is True
    assert profile.chip.peak_flops_informational is None
    assert profile.chip.hbm_capacity == 2**30


def test_calibrated_requires_calibration_block() -> None:
    data = _calibrated()
    del data["calibration"]
    assert _error(data) == "hw.yaml: missing required key 'calibration' at top level"


def test_physical_rejects_calibration_block() -> None:
    assert _error(_profile(calibration=CALIBRATION)).startswith(
        "hw.yaml: unknown key 'calibration' at top level; valid keys: base, chip, combine_threshold, dcn, description, "
        "host, ici, kind, "
        "multi_axis, name, "
    )


def test_calibrated_rejects_links() -> None:
    assert _error(_calibrated(ici={"link_bandwidth": 1e9, "hop_latency": 1e-6})).startswith(
        "hw.yaml: unknown key 'ici' at top level; valid keys: base, calibration, chip, combine_threshold, description, "
        "kind, name, "
    )


def test_unknown_kind_names_the_valid_ones() -> None:
    assert "'physical', 'calibrated'" in _error(_profile(kind="abstract"))


def test_calibrated_profile_and_send_recv_axis_default() -> None:
    profile = validate(ProfileDocument, _calibrated(), "hw.yaml")
    assert isinstance(profile, CalibratedProfile)
    assert profile.prefetch == "ideal"
    assert isinstance(profile.calibration, Calibration)
    assert profile.calibration.send_recv_axis == 1
    assert profile.calibration.all_gather.bandwidth == (1e9, 2e9)


def test_send_recv_axis_must_be_0_or_1() -> None:
    message = _error(_calibrated(calibration={**CALIBRATION, "send_recv_axis": 2}))
    assert message.startswith("hw.yaml: calibration.send_recv_axis: 2 is invalid: input should be 0 or 1")


def test_bandwidth_pair_needs_two_values() -> None:
    short = {**CALIBRATION, "all_gather": {**OP, "bandwidth": [1e9]}}
    assert _error(_calibrated(calibration=short)) == (
        "hw.yaml: calibration.all_gather.bandwidth: [1000000000.0] has no item [1]"
    )
    long = {**CALIBRATION, "all_gather": {**OP, "bandwidth": [1e9, 2e9, 3e9]}}
    assert _error(_calibrated(calibration=long)).startswith(
        "hw.yaml: calibration.all_gather.bandwidth: [1000000000.0, 2000000000.0, 3000000000.0] is invalid: "
        "tuple should have at most 2 items"
    )


@pytest.mark.parametrize("key", ["tensorcores", "mxus_per_core", "mxu_dim"])
def test_counts_must_be_at_least_one(key: str) -> None:
    chip = {**_profile()["chip"], key: 0}
    assert _error(_profile(chip=chip)) == (
        f"hw.yaml: chip.{key}: 0 is invalid: input should be greater than or equal to 1"
    )


def test_gemm_model_literal() -> None:
    chip = {**_profile()["chip"], "gemm_model": "rooflin"}
    assert _error(_profile(chip=chip)) == (
        "hw.yaml: chip.gemm_model: 'rooflin' is invalid: input should be 'roofline' or 'flops'"
    )


@pytest.mark.parametrize("value", [0.5, 0.0, float("nan")])
def test_overlap_slowdown_at_least_one(value: float) -> None:
    assert _error(_profile(overlap_slowdown=value)).startswith("hw.yaml: overlap_slowdown: ")


def test_overlap_slowdown_accepts_values_above_one() -> None:
    assert validate(ProfileDocument, _profile(overlap_slowdown=1.25), "x").overlap_slowdown == 1.25


def test_empty_name_rejected() -> None:
    assert _error(_profile(name="")).startswith("hw.yaml: name: '' is invalid")
