"""Bad input to `tpusim collective`: exit 2, one line (two with a suggestion) quoting it, no traceback."""

from __future__ import annotations

import pytest

from tpusim.cli.main import main

BASE = {
    "--hardware": "tpuv4", "--topology": "4x4x16", "--mesh": "16x16", "--axis-map": "x*y,z", "--axis": "1",
    "--op": "all-gather", "--bytes": "64MB",
}


def _argv(**changes: str | None) -> list[str]:
    options = dict(BASE)
    for key, value in changes.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            options.pop(flag)
        else:
            options[flag] = value
    argv = ["collective"]
    for flag, value in options.items():
        argv += [flag, value]
    return [*argv, "--json"]


CASES = [
    # (changes, text the message must contain, suggestion line or None)
    ({"topology": "3x5x8", "mesh": "8x15", "axis_map": None}, "'3x5x8'", None),
    ({"mesh": "8x8"}, "'8x8'", None),
    ({"axis": "2"}, "--axis '2' is out of range; valid: 0, 1", None),
    ({"bytes": "0"}, "'0'", None),
    ({"bytes": "-5"}, "'-5'", None),
    ({"bytes": "12XB"}, "'12XB'", None),
    ({"bytes": "1000001"}, "1000001", None),
    ({"chunks": "0"}, "'0'", None),
    ({"chunks": "2.5"}, "'2.5'", None),
    ({"hardware": "tpu-v4"}, "'tpu-v4'", "did you mean 'tpuv4'?"),
    ({"axis_map": "x,z"}, "'x,z'", None),
    ({"hardware": "meshslice-tpu-fit", "axis_map": None}, "'4x4x16'", None),
    ({"hardware": "meshslice-tpu-fit", "topology": None}, "'x*y,z'", None),
    ({"op": "all-gathr"}, "unknown collective operation 'all-gathr'", "did you mean 'all-gather'?"),
    ({"op": "send-recv", "offset": "16"}, "--offset 16", None),
    ({"op": "broadcast", "root": "-1"}, "--root '-1' must be an integer >= 0", None),
    ({"mesh": "16by16"}, "'16by16'", None),
]


@pytest.mark.parametrize(("changes", "needle", "suggestion"), CASES, ids=[c[1] for c in CASES])
def test_bad_input(
    capsys: pytest.CaptureFixture[str], changes: dict[str, str | None], needle: str, suggestion: str | None
) -> None:
    assert main(_argv(**changes)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == (2 if suggestion else 1), lines
    assert needle in lines[0]
    if suggestion:
        assert lines[1] == suggestion


def test_valid_values_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    main(_argv(hardware="tpu-v4"))
    first = capsys.readouterr().err.splitlines()[0]
    assert first == ("unknown hardware profile 'tpu-v4'; valid: meshslice-sim, meshslice-tpu-fit, tpuv4, "
                     "tpuv4-wire, tpuv5e, tpuv5p, tpuv6e")


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", *_argv(mesh="8x8")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.splitlines()[-1].startswith("mesh '8x8' has 64 chips")
