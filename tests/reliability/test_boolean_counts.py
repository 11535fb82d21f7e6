"""Booleans are never counts (issue 26, lower items): True or False for any integer field of a request is refused
with one line, through the Python API, an experiment file's point (``tpusim run``) and the command line; so are
the run options (``jobs``, ``timeout``, ``connect_timeout``), an experiment's ``max_points`` and the counts of a
model or hardware file. Before, pydantic took True as 1 and False as 0 wherever a plain ``int`` was declared
(``offset: true`` shifted by one, ``max_points: true`` capped a sweep at one point, ``layers: true`` made a
one-layer model).

The fields are found by looking at the request models, so a new integer field is covered (or fails
``test_every_integer_field_of_every_request_has_a_case``) without editing this file's list by hand.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from tests.reliability.files import TINY_GEMM_POINT
from tests.small_model import SMALL_MODEL_YAML
from tpusim import api
from tpusim.cli.derive import flag_of
from tpusim.cli.main import main
from tpusim.config.catalog import HARDWARE
from tpusim.config.requests import CollectiveRequest, GemmRequest, Request, StepRequest, TuneRequest
from tpusim.errors import TpusimError

KINDS: dict[str, tuple[type[Request], Callable[..., Any], dict[str, Any]]] = {
    "collective": (CollectiveRequest, api.collective, {"hardware": "tpuv4", "topology": "torus:4x4", "mesh": "4x4",
                                                       "axis": 0, "op": "all-gather", "bytes": "1MB"}),
    "gemm": (GemmRequest, api.gemm, {"hardware": "meshslice-tpu-fit", "mesh": "2x2", "algorithm": "meshslice",
                                     "dataflow": "os", "m": 64, "n": 64, "k": 64}),
    "step": (StepRequest, api.step, {"model": "gpt3-175b", "hardware": "meshslice-sim", "mesh": "4x4",
                                     "algorithm": "collective"}),
    "tune": (TuneRequest, api.tune, {"model": "gpt3-175b", "hardware": "meshslice-sim", "chips": 16}),
}

AT_LEAST_1 = "{field} {value} must be an integer >= 1"
AT_LEAST_0 = "{field} {value} must be an integer >= 0"
SIZE = "{field}: size {value} is not a number of bytes"
ZERO = ("ZeRO stage {value} does not exist; valid: 0 (model state replicated), 1 (optimizer state sharded over the "
        "data-parallel replicas), 2 (and gradients), 3 (and weights)")
MESSAGES: dict[str, str] = {
    "overlap_limit": "{field} {value} must be an integer >= 1 or 'unlimited'",
    **dict.fromkeys(["chips", "chunks", "m", "n", "k", "slices", "block", "batch", "microbatches", "dp",
                     "refine_meshes", "dcn_data"], AT_LEAST_1),
    **dict.fromkeys(["root", "seed", "prefetch_window"], AT_LEAST_0),
    "offset": "{field} {value} must be an integer",
    "axis": "{field} {value} is out of range; valid: 0, 1",
    "bytes": SIZE,
    "prefetch_budget": SIZE,
    "zero_stage": ZERO,
}
"""The one line that refuses ``value`` for an integer field, by field (the same for every request that has it)."""
TUNE_ZERO = ZERO + ", or any (every stage searched)"


def _integer_typed(annotation: Any) -> bool:
    """Whether a field's type admits an integer that is not a bool (``int``, ``int | str``, ``Literal[0, 1]``,
    ``list[int] | int | None``; not ``bool`` nor ``float``)."""
    if annotation is int:
        return True
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return any(type(arg) is int for arg in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType, list, tuple, typing.Annotated):
        return any(_integer_typed(arg) for arg in typing.get_args(annotation))
    return False


CASES = sorted((kind, name) for kind, (model, _, _) in KINDS.items() for name, field in model.model_fields.items()
               if _integer_typed(field.annotation))


def expected(kind: str, field: str, value: object) -> str:
    template = TUNE_ZERO if (kind, field) == ("tune", "zero_stage") else MESSAGES[field]
    return template.format(field=field, value=repr(value))


def _one_line(status: int, capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert (status, out, "Traceback" in err, len(err.splitlines())) == (2, "", False, 1), err
    return err.rstrip("\n")


def test_every_integer_field_of_every_request_has_a_case() -> None:
    assert {field for _, field in CASES} == set(MESSAGES)
    assert ("collective", "offset") in CASES and ("tune", "dcn_data") in CASES  # the search finds plain ints too


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(("kind", "field"), CASES, ids=[f"{k}-{f}" for k, f in CASES])
def test_a_boolean_count_is_refused_through_the_api(kind: str, field: str, value: bool) -> None:
    _, call, base = KINDS[kind]
    with pytest.raises(TpusimError) as refused:
        call(**{**base, field: value})
    assert refused.value.exit_code == 2
    assert refused.value.message == expected(kind, field, value)


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(("kind", "field"), CASES, ids=[f"{k}-{f}" for k, f in CASES])
def test_a_boolean_count_in_an_experiment_point_is_refused(kind: str, field: str, value: bool, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bool.yaml"
    path.write_text(yaml.safe_dump({"name": "bool", "point": {"kind": kind, **KINDS[kind][2], field: value}}))
    line = _one_line(main(["run", str(path), "--out", str(tmp_path / "out")]), capsys)
    message = expected(kind, field, value)
    shown = message.removeprefix(f"{field}: ").removeprefix(f"{field} ")  # the key path is the label in a file
    assert line == f"{path}: point.{field}: {shown}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("kind", "field"), CASES, ids=[f"{k}-{f}" for k, f in CASES])
def test_a_boolean_word_on_the_command_line_is_refused(kind: str, field: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # the flag's text is checked by the field's own check: the line is the API's refusal of the word, the flag
    # its label
    _, call, base = KINDS[kind]
    with pytest.raises(TpusimError) as refused:
        call(**{**base, field: "true"})
    message = refused.value.message
    assert "'true'" in message
    arguments = {**base, field: "true"}
    argv = [kind, *(part for name, value in arguments.items() for part in (flag_of(name), str(value)))]
    assert _one_line(main(argv), capsys) == (
        flag_of(field) + message.removeprefix(field) if message.startswith(field) else message)


# ---------------------------------------------------------------------------------------------- run options

@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize(("option", "message"), [
    ("jobs", "jobs {value} must be an integer >= 1"),
    ("timeout", "--timeout {value} must be a finite number of seconds > 0"),
    ("connect_timeout", "--connect-timeout {value} must be a finite number of seconds > 0"),
])
def test_a_boolean_run_option_is_refused(option: str, message: str, value: bool, tmp_path: Path) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\n" + TINY_GEMM_POINT)
    with pytest.raises(TpusimError) as refused:
        api.run_experiment(tmp_path / "tiny.yaml", tmp_path / "out", **_options(option, value))
    assert (refused.value.exit_code, refused.value.message) == (2, message.format(value=value))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flag", "message"), [
    ("--jobs", "--jobs 'true' must be an integer >= 1"),
    ("--timeout", "--timeout 'true' must be a finite number > 0"),
    ("--connect-timeout", "--connect-timeout 'true' must be a finite number > 0"),
])
def test_a_boolean_word_as_a_run_option_is_refused(flag: str, message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiny.yaml").write_text("name: tiny\n" + TINY_GEMM_POINT)
    status = main(["run", str(tmp_path / "tiny.yaml"), "--out", str(tmp_path / "out"), flag, "true"])
    assert _one_line(status, capsys) == message
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- files' counts

NOT_A_COUNT = "{value} must be a whole number, not true or false"


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_max_points_is_refused(value: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "capped.yaml"
    path.write_text(f"name: capped\nmax_points: {str(value).lower()}\n" + TINY_GEMM_POINT
                    + "sweep:\n  grid:\n    m: [64, 128]\n")
    line = _one_line(main(["run", str(path), "--out", str(tmp_path / "out")]), capsys)
    assert line == f"{path}: max_points: {NOT_A_COUNT.format(value=value)}"
    assert not (tmp_path / "out").exists()


def test_a_boolean_count_in_a_model_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(SMALL_MODEL_YAML.replace("layers: 2", "layers: true"))
    status = main(["step", "--model", str(path), "--hardware", "tpuv4", "--mesh", "2x2", "--algorithm", "collective"])
    assert _one_line(status, capsys) == f"{path}: layers: {NOT_A_COUNT.format(value=True)}"


def test_a_boolean_count_in_a_hardware_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (HARDWARE.root() / "tpuv4.yaml").read_text()
    assert "tensorcores: 2" in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace("name: tpuv4", "name: bad").replace("tensorcores: 2", "tensorcores: false"))
    status = main(["gemm", "--hardware", str(path), "--mesh", "2x2", "--algorithm", "collective", "--dataflow", "os",
                   "--m", "64", "--n", "64", "--k", "64"])
    assert _one_line(status, capsys) == f"{path}: chip.tensorcores: {NOT_A_COUNT.format(value=False)}"


def _options(option: str, value: object) -> dict[str, Any]:
    """``{option: value}`` as keyword arguments of any type (the point is a wrong one)."""
    return {option: value}
