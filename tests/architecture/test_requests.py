"""Every field of every request model reaches the command line, the Python API and the JSON Schema, with one
help text, and a value given through any of them is checked by the same model."""

from __future__ import annotations

import inspect

import pytest

import tpusim.api as api
from tpusim.cli.derive import flag_of
from tpusim.cli.main import command_parser, main
from tpusim.config import Experiment
from tpusim.config.requests import REQUESTS, CollectiveRequest, GemmRequest, Request, Scale, StepRequest, TuneRequest

ENTRIES = [(CollectiveRequest, "collective", api.collective), (GemmRequest, "gemm", api.gemm),
           (StepRequest, "step", api.step), (TuneRequest, "tune", api.tune)]


def _fields(kind: type[Request]) -> list[tuple[str, str, str]]:
    """(field, flag, description) of every field, the scale block's fields one by one."""
    rows = []
    for name, field in kind.model_fields.items():
        if name == "kind":
            continue
        if name == "scale":
            rows += [(name, flag_of(f"scale_{sub.alias or key}"), sub.description or "")
                     for key, sub in Scale.model_fields.items()]
        else:
            rows.append((name, flag_of(name), field.description or ""))
    return rows


def test_every_request_has_an_entry() -> None:
    assert {kind for kind, _, _ in ENTRIES} == set(REQUESTS)


@pytest.mark.parametrize(("kind", "command", "function"), ENTRIES, ids=[c for _, c, _ in ENTRIES])
def test_every_field_is_a_flag_with_its_description(kind: type[Request], command: str, function: object) -> None:
    helps = {flag: action.help or "" for action in command_parser(command)._actions for flag in action.option_strings}
    for name, flag, description in _fields(kind):
        assert flag in helps, f"{kind.__name__}.{name} has no flag {flag}"
        assert description and description in helps[flag], f"{flag}: help differs from the field's description"


@pytest.mark.parametrize(("kind", "command", "function"), ENTRIES, ids=[c for _, c, _ in ENTRIES])
def test_every_field_is_a_keyword_of_the_api(kind: type[Request], command: str, function: object) -> None:
    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    for name, field in kind.model_fields.items():
        if name == "kind":
            continue
        assert name in parameters, f"api.{command} lacks {name}"
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert (parameters[name].default is inspect.Parameter.empty) is field.is_required()
    assert "context" in parameters


@pytest.mark.parametrize(("kind", "command", "function"), ENTRIES, ids=[c for _, c, _ in ENTRIES])
def test_every_field_is_in_the_experiment_schema(kind: type[Request], command: str, function: object) -> None:
    schema = Experiment.model_json_schema(by_alias=True)["$defs"][kind.__name__]
    for name, field in kind.model_fields.items():
        key = field.alias or name
        assert key in schema["properties"], f"the schema of {kind.__name__} lacks {key}"
        if name != "kind":
            assert schema["properties"][key].get("description") == field.description


def test_one_check_for_a_value_from_anywhere(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(Exception) as from_api:
        api.step(model="gpt3-175b", hardware="meshslice-sim", mesh="16x16", batch=0)
    assert from_api.value.message == "batch 0 must be an integer >= 1"  # type: ignore[attr-defined]
    assert main(["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--mesh", "16x16",
                 "--batch", "0"]) == 2
    assert capsys.readouterr().err.strip() == "--batch '0' must be an integer >= 1"


def test_an_unknown_keyword_is_refused_with_a_suggestion() -> None:
    with pytest.raises(Exception) as info:
        api.gemm(hardware="meshslice-sim", mesh="2x2", dataflow="os", m=64, n=64, k=64, slicez=2)
    assert info.value.message.startswith("unknown argument 'slicez' of a gemm request; valid: ")  # type: ignore[attr-defined]
    assert info.value.suggestion == "did you mean 'slices'?"  # type: ignore[attr-defined]
