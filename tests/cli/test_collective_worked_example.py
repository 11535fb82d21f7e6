"""The worked example of ``tpusim collective``: 64 MB all-gather over the wrapped z axis of a 4x4x16 slice."""

from __future__ import annotations

import json

import pytest

from tpusim.cli.main import main

ARGV = [
    "collective", "--hardware", "tpuv4-wire", "--topology", "4x4x16", "--mesh", "16x16", "--axis-map", "x*y,z",
    "--axis", "1", "--op", "all-gather", "--bytes", "64MB",
]
EXPECTED = 15e-6 + (15 / 16) * 64e6 / 90e9


def _run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    decoder = json.JSONDecoder()
    payload, end = decoder.raw_decode(out)
    assert out[end:].strip() == ""  # exactly one object
    assert isinstance(payload, dict)
    return payload


def test_worked_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = _run_json(capsys, ARGV)
    assert result["time_s"] == pytest.approx(EXPECTED, rel=1e-9)
    assert result["analytic_time_s"] == pytest.approx(EXPECTED, rel=1e-9)
    assert result["time_s"] == pytest.approx(result["analytic_time_s"], rel=1e-9)
    assert {"bytes_sent", "max_link_bytes", "transfers", "events", "mapping"} <= result.keys()
    assert result["max_link_bytes"] == 15 * 2e6  # 15 half-shards of 2 MB on every z link
    assert result["bytes_sent"] == 16 * 16 * 15 * 4e6  # groups * n * (n-1) * shard
    assert result["transfers"] == 16 * 16 * 2 * 15  # groups * ranks * directions * steps
    assert result["events"] > 0
    assert result["max_link_utilisation"] == pytest.approx((15 * 2e6 / 45e9) / EXPECTED, rel=1e-9)
    sizes = (result["bytes"], result["unit_bytes"], result["group_size"], result["groups"])
    assert sizes == (64e6, 4e6, 16, 16)
    assert result["mapping"]["topology"] == "tpuv4:4x4x16"
    assert result["mapping"]["axis1"] == {
        "size": 16, "physical": ["z"], "embedding": "wrapped ring", "closed": True, "max_hops": 1,
    }
    assert result["notes"] == []


def test_worked_example_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    first = _run_json(capsys, ARGV)
    second = _run_json(capsys, ARGV)
    assert first == second


def test_worked_example_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ARGV) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "all-gather of 64 MB on axis 1 (16 groups of 16 chips), tpuv4-wire"
    assert lines[1].split() == ["time", "681.667", "us", "(closed", "form", "681.667", "us)"]


def test_calibrated_profile_notes_the_abstract_network(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["collective", "--hardware", "meshslice-tpu-fit", "--mesh", "8x8", "--axis", "1",
            "--op", "all-gather", "--bytes", "8MiB"]
    result = _run_json(capsys, argv)
    assert result["time_s"] == pytest.approx(13e-6 + 7 * (2**20 / 79.751e9 + 5e-6), rel=1e-9)
    assert (result["bytes_sent"], result["max_link_bytes"], result["transfers"]) == (None, None, 0)
    assert result["mapping"]["topology"] == "abstract"
    assert result["notes"] == ["abstract calibrated network: no per-link accounting"]
