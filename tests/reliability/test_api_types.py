"""Wrong types through the Python API: a ``UserError`` naming the argument, before any work is done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpusim import api
from tpusim.errors import UserError

RUN_CASES: list[tuple[dict[str, Any], str]] = [
    ({"out": None}, "out None must be a path (str or pathlib.Path)"),
    ({"jobs": "2"}, "jobs '2' must be an integer >= 1"),
    ({"jobs": 2.5}, "jobs 2.5 must be an integer >= 1"),
    ({"jobs": True}, "jobs True must be an integer >= 1"),
    ({"experiment": None}, "experiment None must be a path (str or pathlib.Path)"),
    ({"experiment": 7}, "experiment 7 must be a path (str or pathlib.Path)"),
    ({"resume": "no"}, "resume 'no' must be True or False"),
    ({"yes": 1}, "yes 1 must be True or False"),
    ({"cache": 5}, "cache 5 must be a path (str or pathlib.Path) or None"),
    ({"progress": 5}, "progress 5 must be a function (done, total) or None"),
    ({"scheduler": 5, "executor": "dask"}, "scheduler 5 must be an address such as 'tcp://host:8786' or None"),
]


@pytest.mark.parametrize("change, message", RUN_CASES, ids=[m.split()[0] + str(i) for i, (_, m) in
                                                             enumerate(RUN_CASES)])
def test_run_experiment_refuses_wrong_types(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"experiment": "headline", "out": tmp_path / "out", **change}
    with pytest.raises(UserError) as info:
        api.run_experiment(**arguments)
    assert str(info.value) == message
    assert not (tmp_path / "out").exists()  # refused before any folder was made


@pytest.mark.parametrize("call, arguments, field", [
    (api.gemm, {"hardware": None}, "hardware"),
    (api.gemm, {"algorithm": None}, "algorithm"),
    (api.step, {"model": None}, "model"),
    (api.step, {"allow_infeasible": "no"}, "allow_infeasible"),
    (api.collective, {"axis": 0.5}, "axis"),
])
def test_request_fields_of_the_wrong_type_are_user_errors(call: Any, arguments: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {
        api.gemm: {"hardware": "meshslice-tpu-fit", "mesh": "2x2", "algorithm": "summa", "dataflow": "os",
                   "m": 64, "n": 64, "k": 64},
        api.step: {"hardware": "meshslice-sim", "model": "gpt3-175b", "mesh": "16x16", "algorithm": "collective"},
        api.collective: {"hardware": "tpuv4", "topology": "torus:4x4", "mesh": "4x4", "axis": 0,
                         "op": "all-gather", "bytes": "1MB"},
    }[call]
    with pytest.raises(UserError) as info:
        call(**{**base, **arguments})
    assert str(info.value).startswith(f"{field} ")


GEMM_ARGUMENTS: dict[str, Any] = {"hardware": "meshslice-tpu-fit", "mesh": "2x2", "algorithm": "summa",
                                  "dataflow": "os", "m": 64, "n": 64, "k": 64}


@pytest.mark.parametrize("call, keyword, value, message", [
    (api.gemm, "trace", 123, "trace 123 must be a file path (a str or pathlib.Path) or None"),
    (api.step, "trace", ["t.json"], "trace ['t.json'] must be a file path (a str or pathlib.Path) or None"),
    (api.tune, "trace_best", 1.5, "trace_best 1.5 must be a file path (a str or pathlib.Path) or None"),
    (api.gemm, "trace_chips", 3, "trace_chips 3 must be a chip list like '0,3,5-7' (a str) or None"),
])
def test_trace_arguments_of_the_wrong_type_are_user_errors(tmp_path: Path, call: Any, keyword: str, value: Any,
                                                           message: str) -> None:
    arguments: dict[str, Any] = {
        api.gemm: GEMM_ARGUMENTS,
        api.step: {"hardware": "meshslice-sim", "model": "gpt3-175b", "mesh": "4x4", "algorithm": "collective"},
        api.tune: {"hardware": "meshslice-sim", "model": "gpt3-175b", "chips": 16},
    }[call]
    if keyword == "trace_chips":
        arguments = {**arguments, "trace": str(tmp_path / "t.json")}
    with pytest.raises(UserError) as info:
        call(**arguments, **{keyword: value})
    assert str(info.value) == message
    assert list(tmp_path.iterdir()) == []
