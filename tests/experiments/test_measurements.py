"""Measured training runs: the shipped table, the CSV reader's refusals, the row-to-request mapping, the
comparison's statuses and statistics, and its place in ``tpusim validate`` (docs/validation.md#measured-training-runs).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.refusals import refusal
from tpusim.cli.main import main
from tpusim.config import TransformerModel
from tpusim.config.requests import StepRequest
from tpusim.errors import InfeasibleError
from tpusim.experiments import validation
from tpusim.experiments.measurements import compare, convert
from tpusim.experiments.measurements.compare import RowStatus, compare_measurements, unavailable_fields
from tpusim.experiments.measurements.convert import row_request
from tpusim.experiments.measurements.table import COLUMNS, SHIPPED_TABLE, MeasuredRun, read_measurements

ROOT = Path(__file__).resolve().parents[2]
TABLE = "configs/measurements/calibration.csv"
SOURCE_SHA256 = "57bad5625866ae3dcab1f80b4abf3a8ceec21ef338a9cd088d1301b3db47be37"
"""sha256 of the published calibration table the shipped file copies, byte for byte."""


def _runs() -> dict[str, MeasuredRun]:
    return {run.id: run for run in read_measurements()}


def _rows() -> tuple[list[str], list[list[str]]]:
    header, *body = list(csv.reader(io.StringIO(SHIPPED_TABLE.read_text(), newline="")))
    return header, body


def _write(path: Path, header: list[str], body: list[list[str]]) -> None:
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\n").writerows([header, *body])
    path.write_text(out.getvalue())


# ---------------------------------------------------------------------------------------------- the table


def test_the_shipped_table_is_the_published_one_byte_for_byte() -> None:
    assert hashlib.sha256(SHIPPED_TABLE.read_bytes()).hexdigest() == SOURCE_SHA256
    assert SHIPPED_TABLE.resolve() == ROOT / TABLE


def test_the_shipped_table_reads_into_eleven_typed_rows() -> None:
    header, body = _rows()
    assert tuple(header) == COLUMNS
    runs = read_measurements()
    assert [run.id for run in runs] == [line[0] for line in body]
    assert [run.id for run in runs] == [
        "mt-v4-22b-1x", "paper-palm-540b-6144v4", "mt-v5e-16b-1x", "mt-v5e-32b-1x", "mt-v5e-16b-4x", "mt-v5e-16b-32x",
        "mt-v5p-1024b-2048-1x", "mt-v5p-128b-256-1x", "tr-v6e-gpt3-175b-256-bf16-a", "tr-v6e-llama3.1-70b-256-bs4",
        "tr-v6e-llama3.1-8b-256"]
    assert {g: sum(run.tpu == g for run in runs) for g in ("v4", "v5e", "v5p", "v6e")} == {
        "v4": 2, "v5e": 4, "v5p": 2, "v6e": 3}
    palm = _runs()["paper-palm-540b-6144v4"]
    assert (palm.chips, palm.slices, palm.global_batch_sequences, palm.per_device_batch) == (6144, 2, 2048, 0.3333)
    assert (palm.step_time_s, palm.mlp_gated, palm.config_commit) == (17.601, True, "")
    assert all(run.source_repo and run.source_path and run.source_commit for run in runs)
    v5p = _runs()["mt-v5p-1024b-2048-1x"]
    assert (v5p.chips, v5p.ici_fsdp, v5p.ici_tensor, v5p.remat_policy, v5p.step_time_s) == (1024, 64, 16, "full",
                                                                                            100.632)


def test_the_three_16b_v5e_rows_differ_only_in_their_slice_count() -> None:
    """The same model on the same 256-chip slice at 1, 4 and 32 slices: only the columns that count slices, chips
    and sequences (and the measured figures) differ."""
    runs = _runs()
    rows = [runs[f"mt-v5e-16b-{n}x"] for n in (1, 4, 32)]
    counting = {"chips", "slices", "dcn_data", "global_batch_sequences", "id", "step_time_s",
                "measured_tflops_per_chip", "measured_mfu"}
    for row in rows[1:]:
        assert {c for c in COLUMNS if getattr(row, c) != getattr(rows[0], c)} == counting
    assert [(r.slices, r.dcn_data, r.chips, r.global_batch_sequences, r.step_time_s) for r in rows] == [
        (1, 1, 256, 1536, 10.659), (4, 4, 1024, 6144, 10.932), (32, 32, 8192, 49152, 11.843)]
    requests = [row_request(row).fields for row in rows]
    assert [(f["layout"], f["batch"]) for f in requests] == [
        ("fsdp=256", 1536), ("dcn_data=4,fsdp=256", 6144), ("dcn_data=32,fsdp=256", 49152)]
    for fields in requests[1:]:
        strip = ("layout", "batch", "model")
        assert {k: v for k, v in fields.items() if k not in strip} == {
            k: v for k, v in requests[0].items() if k not in strip}
        assert {k: v for k, v in fields["model"].items() if k not in ("name", "description")} == {
            k: v for k, v in requests[0]["model"].items() if k not in ("name", "description")}


# ---------------------------------------------------------------------------------------------- refusals


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # so that messages show the file as 'runs.csv'
    return tmp_path


def _edited(column: str, value: str) -> tuple[list[str], list[list[str]]]:
    header, body = _rows()
    body[0][header.index(column)] = value
    return header, body


def test_an_unknown_column_is_one_line_naming_it_and_the_valid_columns(
        in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, body = _rows()
    _write(in_tmp / "runs.csv", [*header, "notes"], [[*line, "x"] for line in body])
    assert refusal(capsys, ["validate", "--measurements", "runs.csv"]) == (
        f"measurements file 'runs.csv': unknown column 'notes'; valid: {', '.join(COLUMNS)}\n")


def test_a_missing_column_is_one_line(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header, body = _rows()
    gone = header.index("step_time_s")
    _write(in_tmp / "runs.csv", header[:gone] + header[gone + 1:], [line[:gone] + line[gone + 1:] for line in body])
    assert refusal(capsys, ["validate", "--measurements", "runs.csv", "--json"]) == (
        "measurements file 'runs.csv': missing column 'step_time_s'; valid: every column of the table "
        "(configs/measurements/README.md)\n")


@pytest.mark.parametrize(("column", "value", "says"), [
    ("step_time_s", "13.8 min", "'13.8 min' carries a unit; valid: a number > 0 of seconds, written without a unit "
                                "(e.g. 13.829)"),
    ("chips", "64.5", "'64.5' is not a whole number >= 1; valid: a whole number >= 1 (e.g. 64)"),
    ("chips", "many", "'many' is not a number; valid: a whole number >= 1 (e.g. 64)"),
    ("tpu", "v9", "'v9' is not a TPU generation; valid: v4, v5e, v5p, v6e"),
    ("mlp_gated", "yes", "'yes' is not a flag; valid: true, false"),
    ("remat_policy", "some", "'some' is not a rematerialisation policy; valid: full; minimal; remat custom: "
                             "NAME,NAME,...=offload(host); a policy of its own ending in '(~full)'"),
    ("attention", "ring", "'ring' is not an attention kernel; valid: text starting with dot_product, flash_noncausal "
                          "or flash(causal"),
    ("matmul_dtype", "fp8", "'fp8' is not a matmul type; valid: bf16, int8 (a note may follow after a space)"),
])
def test_a_bad_value_is_one_line_naming_row_column_value_and_what_is_valid(
        in_tmp: Path, capsys: pytest.CaptureFixture[str], column: str, value: str, says: str) -> None:
    _write(in_tmp / "runs.csv", *_edited(column, value))
    assert refusal(capsys, ["validate", "--measurements", "runs.csv"]) == (
        f"measurements file 'runs.csv', row 'mt-v4-22b-1x', column {column}: {says}\n")


def test_degrees_that_do_not_multiply_to_the_chips_are_refused(in_tmp: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _write(in_tmp / "runs.csv", *_edited("ici_fsdp", "32"))
    assert refusal(capsys, ["validate", "--measurements", "runs.csv"]) == (
        "measurements file 'runs.csv', row 'mt-v4-22b-1x', column chips_per_slice: 64 differs from ici_fsdp x "
        "ici_tensor x ici_data = 32; valid: degrees whose product is the chips they share\n")


def test_a_short_line_a_repeated_id_and_too_many_rows_are_refused(
        in_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    header, body = _rows()
    _write(in_tmp / "runs.csv", header, [body[0][:-1]])
    assert refusal(capsys, ["validate", "--measurements", "runs.csv"]) == (
        "measurements file 'runs.csv', row 1: 38 values for 39 columns; valid: one value per column (quote values "
        "with commas)\n")
    _write(in_tmp / "runs.csv", header, [body[0], body[0]])
    assert refusal(capsys, ["validate", "--measurements", "runs.csv"]) == (
        "measurements file 'runs.csv': row id 'mt-v4-22b-1x' appears twice; valid: one row per id\n")
    _write(in_tmp / "runs.csv", header, body)
    monkeypatch.setenv("TPUSIM_LIMITS_MEASUREMENT_ROWS", "4")
    assert refusal(capsys, ["validate", "--measurements", "runs.csv"]) == (
        "measurements file 'runs.csv' has 11 rows, which exceeds the limit of 4 rows of a measurements CSV file; "
        "valid: up to 4 (raise it with TPUSIM_LIMITS_MEASUREMENT_ROWS=N, see docs/limits.md)\n")


def test_only_bounded_regular_files_are_read(in_tmp: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert refusal(capsys, ["validate", "--measurements", "/dev/zero"]) == (
        "cannot read measurements file '/dev/zero': not a regular file (a device, FIFO or socket); valid: a CSV "
        "file\n")
    _write(in_tmp / "runs.csv", *_rows())
    monkeypatch.setenv("TPUSIM_LIMITS_MEASUREMENT_BYTES", "1000")
    assert refusal(capsys, ["validate", "--measurements", "runs.csv"]) == (
        "measurements file 'runs.csv' is larger than the limit: its size exceeds the limit of 1000 bytes of a "
        "measurements CSV file; valid: up to 1000 (raise it with TPUSIM_LIMITS_MEASUREMENT_BYTES=N, see "
        "docs/limits.md)\n")


# ---------------------------------------------------------------------------------------------- the mapping

_ALWAYS = {"kind": "step", "algorithm": "tp1d", "precision": "bf16", "embedding": True,
           "optimizer": True, "fidelity": "auto"}


def test_the_v5p_row_becomes_its_step_request() -> None:
    asked = row_request(_runs()["mt-v5p-128b-256-1x"])
    assert asked.fields == {**_ALWAYS, "hardware": "tpuv5p", "batch": 256, "layout": "fsdp=16,tensor=8",
                            "recompute": "minimal", "attention": "fused-causal", "model": {
        "name": "mt-v5p-128b-256-1x",
        "description": "measured run mt-v5p-128b-256-1x (AI-Hypercomputer/maxtext, MaxText/configs/v5p/README.md)",
        "layers": 64, "hidden": 10240, "heads": 64, "kv_heads": 64, "head_dim": 256, "ffn": 65536,
        "mlp": {"kind": "plain", "activation": "relu"}, "block": "parallel", "tied_embeddings": True,
        "vocabulary": 32768, "sequence": 2048}}
    assert asked.notes == ()


def test_the_full_recompute_v5p_row_becomes_its_step_request() -> None:
    asked = row_request(_runs()["mt-v5p-1024b-2048-1x"])
    # 1024 chips: tpuv5p's default slice of 1024 (8x8x16), so no topology field
    assert asked.fields == {**_ALWAYS, "hardware": "tpuv5p", "batch": 2048, "layout": "fsdp=64,tensor=16",
                            "recompute": "full", "attention": "fused-causal", "model": {
        "name": "mt-v5p-1024b-2048-1x",
        "description": "measured run mt-v5p-1024b-2048-1x (AI-Hypercomputer/maxtext, MaxText/configs/v5p/README.md)",
        "layers": 128, "hidden": 20480, "heads": 128, "kv_heads": 128, "head_dim": 256, "ffn": 131072,
        "mlp": {"kind": "plain", "activation": "relu"}, "block": "parallel", "tied_embeddings": True,
        "vocabulary": 32768, "sequence": 2048}}
    assert asked.notes == ()


def test_the_palm_row_becomes_a_two_slice_request_with_a_note() -> None:
    asked = row_request(_runs()["paper-palm-540b-6144v4"])
    # 3072 chips per pod: no default TPU v4 slice, so the most cube-like one of 48 whole cubes (3 x 4 x 4)
    assert asked.fields == {**_ALWAYS, "hardware": "tpuv4", "batch": 2048, "layout": "dcn_data=2,fsdp=256,tensor=12",
                            "topology": "12x16x16", "recompute": "full", "attention": "unfused", "model": {
        "name": "paper-palm-540b-6144v4",
        "description": "measured run paper-palm-540b-6144v4 (paper: PaLM arXiv:2204.02311 (Sec.4, 4.1, Table 1/3, "
                       "App.B), arXiv:2204.02311)",
        "layers": 118, "hidden": 18432, "heads": 48, "kv_heads": 1, "head_dim": 256, "ffn": 73728,
        "mlp": {"kind": "gated", "activation": "silu"}, "block": "parallel", "tied_embeddings": True,
        "vocabulary": 256000, "sequence": 2048}}
    assert asked.notes == ("remat policy 'save 1 fully-sharded activation/layer, remat rest (~full)' simulated as "
                           "recompute full",)


def test_the_llama_70b_row_offloads_its_named_activations() -> None:
    asked = row_request(_runs()["tr-v6e-llama3.1-70b-256-bs4"])
    assert asked.fields == {**_ALWAYS, "hardware": "tpuv6e", "batch": 1024, "layout": "fsdp=256",
                            "recompute": "custom",
                            "remat_offload": ["decoder_layer_input", "query_proj", "key_proj", "value_proj"],
                            "attention": "fused-causal", "model": {
        "name": "tr-v6e-llama3.1-70b-256-bs4",
        "description": "measured run tr-v6e-llama3.1-70b-256-bs4 (AI-Hypercomputer/tpu-recipes, "
                       "training/trillium/Llama3.1-70B-MaxText/README.md)",
        "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128, "ffn": 28672,
        "mlp": {"kind": "gated", "activation": "silu"}, "block": "sequential", "tied_embeddings": False,
        "vocabulary": 128256, "sequence": 8192}}


def test_every_shipped_row_maps_its_attention_activation_and_block() -> None:
    """An independent reading of each row's text: compiler flags such as DATA_PARALLEL_OVERLAP are no parallel
    block, and the 2023 rows' non-causal flash kernel is 'fused'."""
    expected = {"mt-v4-22b-1x": ("unfused", "relu", "parallel", "fsdp=64"),
                "mt-v5e-16b-1x": ("fused", "relu", "parallel", "fsdp=256"),
                "mt-v5e-16b-4x": ("fused", "relu", "parallel", "dcn_data=4,fsdp=256"),
                "mt-v5e-16b-32x": ("fused", "relu", "parallel", "dcn_data=32,fsdp=256"),
                "mt-v5e-32b-1x": ("fused", "relu", "parallel", "fsdp=256"),
                "mt-v5p-128b-256-1x": ("fused-causal", "relu", "parallel", "fsdp=16,tensor=8"),
                "mt-v5p-1024b-2048-1x": ("fused-causal", "relu", "parallel", "fsdp=64,tensor=16"),
                "tr-v6e-llama3.1-70b-256-bs4": ("fused-causal", "silu", "sequential", "fsdp=256"),
                "tr-v6e-gpt3-175b-256-bf16-a": ("fused-causal", "gelu", "sequential", "fsdp=256"),
                "tr-v6e-llama3.1-8b-256": ("fused-causal", "silu", "sequential", "fsdp=256"),
                "paper-palm-540b-6144v4": ("unfused", "silu", "parallel", "dcn_data=2,fsdp=256,tensor=12")}
    found = {}
    for run in read_measurements():
        fields = row_request(run).fields
        found[run.id] = (fields["attention"], fields["model"]["mlp"]["activation"], fields["model"]["block"],
                         fields["layout"])
    assert found == expected


# ---------------------------------------------------------------------------------------------- statuses


def test_a_field_tpusim_does_not_define_makes_the_row_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    real = convert.row_request

    def with_extra(run: MeasuredRun) -> convert.RowRequest:
        asked = real(run)
        return convert.RowRequest({**asked.fields, "sparsity": 0.5}, asked.notes)

    monkeypatch.setattr(compare, "row_request", with_extra)
    rows = compare_measurements()
    assert len(rows) == 11 and all(row.status is RowStatus.UNSUPPORTED for row in rows)
    assert all("request field" in row.reason and "'sparsity'" in row.reason for row in rows)
    assert all(row.simulated_step_time_s is None and row.delta is None for row in rows)


def test_unavailable_fields_names_exactly_the_undefined_ones() -> None:
    assert unavailable_fields({"kind": "step", "hardware": "tpuv4", "model": {"name": "m", "layers": 2}}) == ""
    known = set(StepRequest.model_fields)
    assert unavailable_fields({"hardware": "tpuv4", "warp": 1, "model": {"layers": 1, "moe": 8}}) == (
        "request field 'warp' not available" + ("" if "moe" in TransformerModel.model_fields
                                                else "; model field 'moe' not available"))
    assert "warp" not in known


def _simulated(times: dict[str, float], refused: dict[str, str]) -> Any:
    """A stand-in for run_request: a step time for the rows named in ``times``, an InfeasibleError for the others
    (keyed by model name = row id)."""

    def run(kind: type, fields: dict[str, Any], context: Any = None) -> Any:
        assert kind is StepRequest
        name = fields["model"]["name"]
        if name in refused:
            raise InfeasibleError(refused[name])
        return SimpleNamespace(step_time_s=times[name])

    return run


def _simulate_all(monkeypatch: pytest.MonkeyPatch, times: dict[str, float], refused: dict[str, str]) -> None:
    monkeypatch.setattr(compare, "unavailable_fields", lambda fields: "")  # as if every field existed
    monkeypatch.setattr(compare, "run_request", _simulated(times, refused))


def test_the_json_shape_and_the_per_generation_statistics(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    measured = {run.id: run.step_time_s for run in read_measurements()}
    factors = {"mt-v4-22b-1x": 1.25, "mt-v5e-16b-4x": 0.9, "mt-v5e-32b-1x": 1.04, "mt-v5e-16b-32x": 0.85,
               "mt-v5p-128b-256-1x": 0.8, "mt-v5p-1024b-2048-1x": 1.05, "tr-v6e-gpt3-175b-256-bf16-a": 1.1}
    refused = {"paper-palm-540b-6144v4": "paper-palm-540b-6144v4 on 6144 chips does not fit in HBM",
               "mt-v5e-16b-1x": "no such slice", "tr-v6e-llama3.1-70b-256-bs4": "no host offload",
               "tr-v6e-llama3.1-8b-256": "no host offload"}
    _simulate_all(monkeypatch, {name: measured[name] * f for name, f in factors.items()}, refused)
    assert main(["validate", "--measurements", TABLE, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"table", "rows", "generations", "unsupported"}
    assert data["table"] == TABLE and data["unsupported"] == 4
    assert [row["id"] for row in data["rows"]] == list(measured)
    for row in data["rows"]:
        assert set(row) == {"id", "tpu", "measured_step_time_s", "simulated_step_time_s", "delta", "status",
                            "reason", "notes", "request"}
        assert row["measured_step_time_s"] == measured[row["id"]]
        if row["id"] in factors:
            assert row["status"] == "ok" and row["reason"] == ""
            assert row["delta"] == pytest.approx(factors[row["id"]] - 1, abs=1e-12)
        else:
            assert (row["status"], row["reason"], row["delta"]) == ("unsupported", refused[row["id"]], None)
    generations = data["generations"]
    assert list(generations) == ["v4", "v5e", "v5p", "v6e"]
    assert {g: (s["rows"], s["ok"]) for g, s in generations.items()} == {"v4": (2, 1), "v5e": (4, 3), "v5p": (2, 2),
                                                                         "v6e": (3, 1)}
    expected = {"v4": (0.25, 0.25), "v5e": ((0.1 + 0.04 + 0.15) / 3, 0.15), "v5p": ((0.2 + 0.05) / 2, 0.2),
                "v6e": (0.1, 0.1)}
    for generation, (mean, peak) in expected.items():
        assert generations[generation]["mean_abs_delta"] == pytest.approx(mean, abs=1e-12)
        assert generations[generation]["max_abs_delta"] == pytest.approx(peak, abs=1e-12)


def test_the_text_table_and_its_summary_lines(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    measured = {run.id: run.step_time_s for run in read_measurements()}
    refused = {name: "not here" for name in measured if name != "mt-v4-22b-1x"}
    _simulate_all(monkeypatch, {"mt-v4-22b-1x": 2 * 13.829}, refused)
    assert main(["validate", "--measurements", TABLE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"measured training runs from {TABLE} (informational: no tolerance)"
    assert re.fullmatch(r"mt-v4-22b-1x +v4 +13\.829 +27\.658 +\+100\.00% +ok", lines[2])
    assert len(lines) == 2 + 11 + 5
    assert lines[-5:] == ["v4: 2 rows, 1 ok, mean |delta| 100.00%, max |delta| 100.00%",
                          "v5e: 4 rows, 0 ok, mean |delta| -, max |delta| -",
                          "v5p: 2 rows, 0 ok, mean |delta| -, max |delta| -",
                          "v6e: 3 rows, 0 ok, mean |delta| -, max |delta| -",
                          "10 of 11 rows unsupported"]
    assert re.fullmatch(r"mt-v5e-16b-32x +v5e +11\.843 +- +- +unsupported: not here", lines[7])
    assert lines[3].startswith("paper-palm-540b-6144v4 ")
    assert lines[3].endswith("unsupported: not here (remat policy 'save 1 fully-sharded activation/layer, "
                              "remat rest (~full)' simulated as recompute full)")


@pytest.mark.slow
def test_validate_reports_the_shipped_rows_without_failing_on_them(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Measured rows have no tolerance: a 300 % delta leaves the exit status and the failed count alone."""
    measured = {run.id: run.step_time_s for run in read_measurements()}
    _simulate_all(monkeypatch, {name: 4 * time for name, time in measured.items()}, {})
    assert main(["validate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["failed"] == 0
    block = data["measured_runs"]
    assert block["table"] == TABLE and block["unsupported"] == 0
    assert [row["delta"] for row in block["rows"]] == pytest.approx([3.0] * 11, abs=1e-12)
    monkeypatch.setattr(validation, "run_validation", lambda: [validation.Check("made-up", 100.0, 100.0, 0.01)])
    assert main(["validate"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2:4] == ["model: 1 checks, mean |delta| 0.00000%, max |delta| 0.00000%, 0 over tolerance "
                        "(0 unexplained; times in us)", ""]
    assert out[4] == f"measured training runs from {TABLE} (informational: no tolerance)"
    assert out[-1] == "0 of 11 rows unsupported"
