"""Reading a table of measured training runs (the columns of configs/measurements/README.md) into typed rows.

Every value is checked where it is read: a column the table does not define, a missing column, a count that is
not a whole number, a time with a unit, an unknown TPU generation or policy each stop the read with one line
naming the row, the column, the value and what is valid. The file is read as YAML files are (regular files only,
within a size limit) and its rows are bounded by the ``measurement_rows`` limit, since each row is simulated.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType

from tpusim.config.catalog import shipped
from tpusim.config.loader import display_path, read_bounded_text
from tpusim.errors import UserError
from tpusim.limits import LimitError, exceeds

__all__ = ["COLUMNS", "SHIPPED_TABLE", "SHIPPED_TABLE_NAME", "MeasuredRun", "MeasurementError", "TpuGeneration",
           "read_measurements"]

SHIPPED_TABLE_NAME = "configs/measurements/calibration.csv"
"""How output names the shipped table: its path in the source tree."""
SHIPPED_TABLE = shipped(SHIPPED_TABLE_NAME)
"""The measured runs shipped with tpusim (their sources: each row's source_* columns)."""


class MeasurementError(UserError):
    """A measurements table that cannot be read: its columns, or one of its values."""


class TpuGeneration(StrEnum):
    """The TPU generations a measured run may name, and the hardware profile each one runs on."""

    V4 = "v4"
    V5E = "v5e"
    V5P = "v5p"
    V6E = "v6e"

    @property
    def hardware(self) -> str:
        """The physical profile of this generation (configs/hardware/)."""
        return f"tpu{self.value}"


@dataclass(frozen=True)
class MeasuredRun:
    """One row of a measurements table, typed (column meanings: configs/measurements/README.md)."""

    id: str
    tpu: TpuGeneration
    chips: int
    slices: int
    chips_per_slice: int
    peak_flops_per_chip: float
    layers: int
    emb_dim: int
    q_heads: int
    kv_heads: int
    head_dim: int
    mlp_dim: int
    mlp_gated: bool
    vocab: int
    tied_embeddings: bool
    seq_len: int
    per_device_batch: float
    global_batch_sequences: int
    ici_fsdp: int
    ici_tensor: int
    ici_data: int
    dcn_data: int
    dcn_fsdp: int
    remat_policy: str
    attention: str
    matmul_dtype: str
    other_flags: str
    step_time_s: float
    step_time_source: str
    measured_tflops_per_chip: float
    measured_mfu: float
    mfu_definition: str
    certainty: str
    source_repo: str
    source_path: str
    source_commit: str
    config_path: str
    config_commit: str
    report_date: str


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(MeasuredRun))
"""The columns of a measurements table, in the shipped table's order (every one required, no other allowed)."""


# ---------------------------------------------------------------------------------------------- value parsers
# Each parser takes the cell's text and returns the typed value, or raises ValueError whose message says what is
# valid (the caller adds the row, the column and the value).

Parser = Callable[[str], object]


def _count(text: str) -> int:
    valid = "valid: a whole number >= 1 (e.g. 64)"
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"is not a number; {valid}") from None
    if not math.isfinite(number) or not number.is_integer() or number < 1:
        raise ValueError(f"is not a whole number >= 1; {valid}")
    return int(number)


_WITH_UNIT = re.compile(r"[-+0-9.eE]+\s*[^\d\s.]+.*")


def _positive(valid: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            number = float(text)
        except ValueError:
            what = "carries a unit" if _WITH_UNIT.fullmatch(text) else "is not a number"
            raise ValueError(f"{what}; valid: {valid}") from None
        if not math.isfinite(number) or number <= 0:
            raise ValueError(f"is not a finite number > 0; valid: {valid}")
        return number

    return parse


_seconds = _positive("a number > 0 of seconds, written without a unit (e.g. 13.829)")
_number = _positive("a number > 0 (e.g. 2.75e+14)")


def _fraction(text: str) -> float:
    number = _positive("a fraction in (0, 1] (e.g. 0.567)")(text)
    if number > 1:
        raise ValueError("is above 1; valid: a fraction in (0, 1] (e.g. 0.567)")
    return number


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError("is not a flag; valid: true, false")
    return text.lower() == "true"


def _generation(text: str) -> TpuGeneration:
    try:
        return TpuGeneration(text.lower())
    except ValueError:
        raise ValueError(f"is not a TPU generation; valid: {', '.join(TpuGeneration)}") from None


def _text(required: bool) -> Parser:
    def parse(text: str) -> str:
        if required and not text:
            raise ValueError("is empty; valid: any text")
        return text

    return parse


def _one_of(valid: tuple[str, ...]) -> Parser:
    def parse(text: str) -> str:
        if text not in valid:
            raise ValueError(f"is not known; valid: {', '.join(valid)}")
        return text

    return parse


def _date(text: str) -> str:
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text) is None:
        raise ValueError("is not a date; valid: YYYY-MM-DD")
    return text


REMAT_POLICIES = ("full", "minimal", "remat custom: NAME,NAME,...=offload(host)",
                  "a policy of its own ending in '(~full)'")
CUSTOM_REMAT = re.compile(r"remat custom:\s*(?P<names>[a-z_]+(?:\s*,\s*[a-z_]+)*)\s*=\s*offload\(host\)")
"""MaxText's custom policy as the table writes it: the named activations offloaded to host memory."""
NEAR_FULL = "(~full)"
"""How a row marks a policy of its own that recomputes nearly everything (PaLM's)."""


def _remat(text: str) -> str:
    if text in ("full", "minimal") or CUSTOM_REMAT.fullmatch(text) or text.endswith(NEAR_FULL):
        return text
    raise ValueError(f"is not a rematerialisation policy; valid: {'; '.join(REMAT_POLICIES)}")


ATTENTION_KINDS = ("dot_product", "flash_noncausal", "flash(causal")
"""The attention kernels a row may name, by the prefix of its ``attention`` text (detail follows the prefix)."""


def _attention(text: str) -> str:
    if not text.startswith(ATTENTION_KINDS):
        raise ValueError("is not an attention kernel; valid: text starting with dot_product, flash_noncausal or "
                         "flash(causal")
    return text


MATMUL_DTYPES = ("bf16", "int8")


def _dtype(text: str) -> str:
    if text.split(" ", 1)[0] not in MATMUL_DTYPES:
        raise ValueError(f"is not a matmul type; valid: {', '.join(MATMUL_DTYPES)} (a note may follow after a space)")
    return text


_PARSERS: Mapping[str, Parser] = MappingProxyType({
    "id": _text(required=True), "tpu": _generation, "chips": _count, "slices": _count, "chips_per_slice": _count,
    "peak_flops_per_chip": _number, "layers": _count, "emb_dim": _count, "q_heads": _count, "kv_heads": _count,
    "head_dim": _count, "mlp_dim": _count, "mlp_gated": _flag, "vocab": _count, "tied_embeddings": _flag,
    "seq_len": _count, "per_device_batch": _number, "global_batch_sequences": _count, "ici_fsdp": _count,
    "ici_tensor": _count, "ici_data": _count, "dcn_data": _count, "dcn_fsdp": _count, "remat_policy": _remat,
    "attention": _attention, "matmul_dtype": _dtype, "other_flags": _text(required=False), "step_time_s": _seconds,
    "step_time_source": _text(required=True), "measured_tflops_per_chip": _number, "measured_mfu": _fraction,
    "mfu_definition": _text(required=False), "certainty": _one_of(("high", "medium")),
    "source_repo": _text(required=True), "source_path": _text(required=True), "source_commit": _text(required=True),
    "config_path": _text(required=False), "config_commit": _text(required=False), "report_date": _date,
})


# ---------------------------------------------------------------------------------------------- reading


def read_measurements(path: Path | str = SHIPPED_TABLE) -> list[MeasuredRun]:
    """The rows of a measurements CSV file (default: the shipped table), every value checked."""
    shown = display_path(path)
    text = read_bounded_text(path, "measurements", "a CSV file", "measurement_bytes")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        table = list(reader)
    except csv.Error as error:
        raise MeasurementError(f"measurements file {shown!r}, line {reader.line_num}: not valid CSV ({error}); "
                               "valid: comma-separated values, quoted where a value holds a comma") from None
    if not table:
        raise MeasurementError(f"measurements file {shown!r} is empty; valid: a header line with the columns "
                               f"{', '.join(COLUMNS)}, then one line per run")
    header, body = table[0], [line for line in table[1:] if line]
    _check_header(header, shown)
    too_many = exceeds("measurement_rows", len(body))
    if too_many is not None:
        raise LimitError(f"measurements file {shown!r} has {len(body)} rows, which {too_many}")
    runs: list[MeasuredRun] = []
    for number, cells in enumerate(body, start=2):
        if len(cells) != len(header):
            raise MeasurementError(f"measurements file {shown!r}, row {number - 1}: {len(cells)} values for "
                                   f"{len(header)} columns; valid: one value per column (quote values with commas)")
        runs.append(_run(dict(zip(header, cells, strict=True)), shown))
    seen: set[str] = set()
    for run in runs:
        if run.id in seen:
            raise MeasurementError(f"measurements file {shown!r}: row id {run.id!r} appears twice; valid: one row "
                                   "per id")
        seen.add(run.id)
    return runs


def _check_header(header: list[str], shown: str) -> None:
    unknown = [name for name in header if name not in _PARSERS]
    if unknown:
        raise MeasurementError(f"measurements file {shown!r}: unknown column {unknown[0]!r}; valid: "
                               f"{', '.join(COLUMNS)}")
    doubled = [name for name in dict.fromkeys(header) if header.count(name) > 1]
    if doubled:
        raise MeasurementError(f"measurements file {shown!r}: column {doubled[0]!r} appears twice; valid: each "
                               "column once")
    missing = [name for name in COLUMNS if name not in header]
    if missing:
        raise MeasurementError(f"measurements file {shown!r}: missing column{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(repr(name) for name in missing)}; valid: every column of the table "
                               "(configs/measurements/README.md)")


def _run(cells: dict[str, str], shown: str) -> MeasuredRun:
    row = cells["id"].strip() or "(empty)"
    values: dict[str, object] = {}
    for column in COLUMNS:
        text = cells[column].strip()
        try:
            values[column] = _PARSERS[column](text)
        except ValueError as error:
            raise MeasurementError(f"measurements file {shown!r}, row {row!r}, column {column}: {text!r} "
                                   f"{error}") from None
    run = MeasuredRun(**values)  # type: ignore[arg-type]  # each parser returns its column's type
    _check_degrees(run, shown)
    return run


def _check_degrees(run: MeasuredRun, shown: str) -> None:
    """The parallelism degrees must multiply to the chips they claim (the table's README)."""
    where = f"measurements file {shown!r}, row {run.id!r}"
    rules = (("chips", run.chips, "slices x chips_per_slice", run.slices * run.chips_per_slice),
             ("chips_per_slice", run.chips_per_slice, "ici_fsdp x ici_tensor x ici_data",
              run.ici_fsdp * run.ici_tensor * run.ici_data),
             ("slices", run.slices, "dcn_data x dcn_fsdp", run.dcn_data * run.dcn_fsdp))
    for column, value, product, expected in rules:
        if value != expected:
            raise MeasurementError(f"{where}, column {column}: {value} differs from {product} = {expected}; valid: "
                                   "degrees whose product is the chips they share")
