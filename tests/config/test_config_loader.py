"""Strict YAML loading, validation messages and quantity types of tpusim.config.loader."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tpusim.config import (
    Bytes,
    BytesPerSecond,
    FlopsPerSecond,
    FrozenModel,
    Seconds,
    deep_merge,
    load_yaml,
    validate,
)
from tpusim.errors import ConfigError, UserError


class Link(FrozenModel):
    link_bandwidth: BytesPerSecond
    hop_latency: Seconds
    launch_overhead: Seconds = 0.0


class Box(FrozenModel):
    size: Bytes
    rate: FlopsPerSecond | None = None
    ici: Link
    pairs: tuple[BytesPerSecond, BytesPerSecond] = (1.0, 1.0)
    count: int = 1


GOOD = {"size": "8 MiB", "ici": {"link_bandwidth": "45 GB/s", "hop_latency": "1 us"}}


def _write(tmp_path: Path, text: str, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(data: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(Box, data, "configs/x.yaml")
    return info.value


# ---- load_yaml


def test_load_yaml_reads_exponent_floats_as_numbers(tmp_path: Path) -> None:
    # Plain PyYAML (YAML 1.1) would return these as strings.
    data = load_yaml(_write(tmp_path, "a: 5e-6\nb: 45e9\nc: 1.2e12\nd: -3E+2\ne: 7\nf: '5e-6'\n"))
    assert data == {"a": 5e-6, "b": 45e9, "c": 1.2e12, "d": -300.0, "e": 7, "f": "5e-6"}
    assert isinstance(data["a"], float)
    assert isinstance(data["e"], int)


def test_load_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    message = info.value.message
    assert message.startswith(f"{path}:3: YAML syntax error: ")
    assert "\n" not in message


def test_load_yaml_rejects_duplicate_keys(tmp_path: Path) -> None:
    path = _write(tmp_path, "a: 1\nb:\n  c: 1\n  c: 2\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert info.value.message == f"{path}:4: YAML syntax error: duplicate key 'c'"


def test_load_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    data = load_yaml(_write(tmp_path, "base: &b {x: 1, y: 2}\nchild:\n  <<: *b\n  y: 3\n"))
    assert data["child"] == {"x": 1, "y": 3}


def test_load_yaml_missing_file_says_what_it_is(tmp_path: Path) -> None:
    path = tmp_path / "gone.yaml"
    with pytest.raises(ConfigError) as info:
        load_yaml(path, "experiment")
    assert info.value.message == f"cannot read experiment file '{path}': No such file or directory"
    assert isinstance(info.value, UserError)
    assert info.value.exit_code == 2


def test_load_yaml_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read YAML file .*: Is a directory"):
        load_yaml(tmp_path)


def test_load_yaml_empty_file_is_none(tmp_path: Path) -> None:
    assert load_yaml(_write(tmp_path, "")) is None


# ---- quantity types


def test_quantities_accept_si_numbers_and_unit_strings() -> None:
    box = validate(Box, {**GOOD, "rate": "275 TFLOP/s", "pairs": [45e9, "90 GB/s"]}, "x")
    assert box.size == 8 * 2**20
    assert box.rate == 275e12
    assert box.ici.link_bandwidth == 45e9
    assert box.ici.hop_latency == 1e-6
    assert box.pairs == (45e9, 90e9)
    numeric = validate(Box, {"size": 64, "ici": {"link_bandwidth": 45e9, "hop_latency": 0}}, "x")
    assert numeric.size == 64.0
    assert numeric.ici.hop_latency == 0.0
    assert isinstance(numeric.size, float)


def test_bandwidth_without_per_second_quotes_the_value() -> None:
    err = _error({**GOOD, "ici": {"link_bandwidth": "45 GB", "hop_latency": 1e-6}})
    assert err.message == (
        "configs/x.yaml: ici.link_bandwidth: bandwidth '45 GB' needs a unit per second, "
        "e.g. '45 GB/s' or '90e9 B/s'"
    )


@pytest.mark.parametrize("value", [0, -1, -45e9, "0 GB/s", float("inf")])
def test_non_positive_or_infinite_bandwidth_rejected(value: object) -> None:
    err = _error({**GOOD, "ici": {"link_bandwidth": value, "hop_latency": 1e-6}})
    assert err.message.startswith("configs/x.yaml: ici.link_bandwidth: bandwidth ")
    assert "must be a finite number > 0" in err.message


def test_negative_time_rejected_zero_allowed() -> None:
    err = _error({**GOOD, "ici": {"link_bandwidth": 1e9, "hop_latency": "-1 us"}})
    assert err.message == "configs/x.yaml: ici.hop_latency: time '-1 us' must be a finite number >= 0"


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_quantity_of_wrong_type_rejected(value: object) -> None:
    err = _error({**GOOD, "size": value})
    assert err.message.startswith("configs/x.yaml: size: ")
    assert repr(value) in err.message


def test_tuple_index_in_key_path() -> None:
    err = _error({**GOOD, "pairs": [1e9, "2 GB"]})
    assert err.message.startswith("configs/x.yaml: pairs[1]: bandwidth '2 GB' needs a unit per second")


def test_optional_quantity_accepts_none() -> None:
    assert validate(Box, {**GOOD, "rate": None}, "x").rate is None


# ---- validate messages


def test_unknown_key_lists_valid_keys_and_suggests() -> None:
    err = _error({**GOOD, "ici": {"lnk_bandwidth": "45 GB/s", "hop_latency": 1e-6}})
    assert err.message == (
        "configs/x.yaml: unknown key 'lnk_bandwidth' at ici; "
        "valid keys: hop_latency, launch_overhead, link_bandwidth"
    )
    assert err.suggestion == "did you mean 'link_bandwidth'?"


def test_unknown_top_level_key() -> None:
    err = _error({**GOOD, "zzz": 1})
    assert err.message == (
        "configs/x.yaml: unknown key 'zzz' at top level; valid keys: count, ici, pairs, rate, size"
    )
    assert err.suggestion is None


def test_missing_key() -> None:
    err = _error({"size": 1, "ici": {"link_bandwidth": 1e9}})
    assert err.message == "configs/x.yaml: missing required key 'hop_latency' at ici"


def test_other_errors_quote_value_and_say_what_is_valid() -> None:
    err = _error({**GOOD, "count": "many"})
    assert err.message == (
        "configs/x.yaml: count: 'many' is invalid: input should be a valid integer, "
        "unable to parse string as an integer"
    )


def test_non_mapping_is_reported_as_such() -> None:
    assert _error({**GOOD, "ici": 5}).message == "configs/x.yaml: ici: expected a mapping of keys, got 5"
    assert _error([1, 2]).message == "configs/x.yaml: expected a mapping of keys, got [1, 2]"


# ---- FrozenModel and deep_merge


def test_frozen_model_is_immutable_and_strict() -> None:
    box = validate(Box, GOOD, "x")
    with pytest.raises(ValidationError):
        box.size = 2.0  # type: ignore[misc]
    with pytest.raises(ValidationError):
        Box.model_validate({**GOOD, "extra": 1})


def test_deep_merge_merges_mappings_and_replaces_the_rest() -> None:
    base = {"a": {"x": 1, "y": {"p": 1, "q": 2}}, "b": [1, 2], "c": 3}
    child = {"a": {"y": {"q": 9}, "z": 0}, "b": [7], "d": None}
    merged = deep_merge(base, child)
    assert merged == {"a": {"x": 1, "y": {"p": 1, "q": 9}, "z": 0}, "b": [7], "c": 3, "d": None}
    assert base == {"a": {"x": 1, "y": {"p": 1, "q": 2}}, "b": [1, 2], "c": 3}
