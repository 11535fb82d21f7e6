"""The rows of ``results.csv``: one flat row per point, ready for a plain ``pandas.read_csv(path)``.

A row holds ``index``; every input of the point (swept and fixed, defaults included) under ``point.`` and its
key in the experiment file (``point.model``, ``point.scale.beta``); the result's fields under their ``--json``
names, the configuration as it actually ran (for a tune point, that of its ``best`` choice); and ``error``.
Every cell is one number, flag or word (docs/results.md#the-columns-of-resultscsv lists them all):

- a nested setting becomes one dotted column per key (``point.scale.alpha`` ... ``point.scale.dma``);
- a per-FF-layer list becomes one column per layer, named after it (``slices_qkv``, ``slices_out_proj``,
  ``slices_ff1``, ``slices_ff2``; ``point.dataflows_ff1``); a single value given for all four is repeated;
- other lists of a point (a tune point's allowed dataflows, slow chips and links) become one cell of
  space-separated items, as the command line takes them;
- sizes are bytes (``point.bytes``, ``point.prefetch_budget_bytes``);
- nested results (``mapping``, ``switches``, ``per_layer``, ``meshes``, ``runner_up``, ``violations``, ``notes``)
  stay in ``results.json`` only.

pandas reads an empty cell as NaN, so a text column left empty in every row would read back as floats. A text
cell of a point is therefore never empty: a setting left to its default reads ``default``, an empty list and a
point that finished without error read ``none``. A number not given (``point.batch`` of a point that takes the
chip count) is an empty cell, NaN in pandas, as are the result cells of a point that has no result (an error)
or that a point of another kind does not have.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType
from typing import Any

from tpusim.config.requests import FF_LAYERS
from tpusim.units import parse_size

INPUT = "point."
"""Prefix of the columns holding the point's inputs (results.json keeps them under ``point`` too)."""
DEFAULT = "default"
"""A text setting the point leaves to its default (the profile's, the heuristic's, the chip count's slice)."""
NONE = "none"
"""An empty list, or ``error`` of a point that finished."""
NO_ERROR = NONE

PER_LAYER = ("dataflows", "transposes", "slices")
"""Lists with one value per FF layer, in ``FF_LAYERS`` order: a step point's inputs, a step or tune result's."""
_PER_LAYER_INPUTS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType({"step": PER_LAYER})
_NUMBER_INPUTS = frozenset({"chips", "batch", "microbatches", "slices", "chunks", "prefetch_budget"})
"""Optional inputs that are numbers: not given, they stay empty (NaN) rather than reading ``default``."""
_SIZE_INPUTS: MappingProxyType[str, str] = MappingProxyType(
    {"bytes": "bytes", "prefetch_budget": "prefetch_budget_bytes"})
"""Inputs given with units (``64MB``) and their columns, in bytes."""
_NAMED_OBJECTS = frozenset({"hardware", "model"})
"""Inputs that may be given inline as a whole profile or model: the column holds its name."""


def _per_layer(name: str, values: Any) -> dict[str, Any]:
    items = list(values) if isinstance(values, list | tuple) else [values] * len(FF_LAYERS)
    if len(items) == 1:
        items *= len(FF_LAYERS)
    return {f"{name}_{layer}": value for layer, value in zip(FF_LAYERS, items, strict=True)}


def _input(kind: str, name: str, value: Any) -> dict[str, Any]:
    """The columns (without prefix) of one input field."""
    if name in _PER_LAYER_INPUTS.get(kind, ()):
        if value is None:  # the heuristic's dataflows, each layer's fastest K, no transposition
            value = {"dataflows": DEFAULT, "transposes": False}.get(name)
        return _per_layer(name, value)
    if isinstance(value, dict) and name in _NAMED_OBJECTS:
        return {name: value.get("name", DEFAULT)}
    if isinstance(value, dict):
        return {f"{name}.{key}": value[key] for key in sorted(value)}
    if name in _SIZE_INPUTS:
        return {_SIZE_INPUTS[name]: None if value is None else int(parse_size(value))}
    if isinstance(value, list | tuple):
        return {name: " ".join(str(item) for item in value) if value else NONE}
    if value is None and name not in _NUMBER_INPUTS:
        return {name: DEFAULT}
    return {name: value}


def input_cells(settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each input field of a point (as dumped by its request model, by YAML name) and its prefixed columns."""
    kind = str(settings.get("kind", "step"))
    return {name: {INPUT + column: cell for column, cell in _input(kind, name, value).items()}
            for name, value in settings.items()}


# The result columns, in CSV order, and the kinds that have each. Per-layer lists expand in place.
_RESULT_COLUMNS: tuple[tuple[str, frozenset[str]], ...] = tuple(
    (name, frozenset(kinds.split())) for name, kinds in (
        ("step_time_s", "step tune"),
        ("time_s", "collective gemm"),
        ("analytic_time_s", "collective gemm"),
        ("estimate_step_s", "tune"),
        ("compute_s", "gemm step tune"),
        ("exposed_comm_s", "gemm step tune"),
        ("exposed_data_comm_s", "step tune"),
        ("idle_s", "gemm step"),
        ("hbm_stall_s", "gemm step"),
        ("mfu", "step tune"),
        ("hfu", "step tune"),
        ("tokens_per_s", "step tune"),
        ("seconds_per_sequence", "step tune"),
        ("fidelity", "collective gemm step tune"),
        ("mesh", "gemm step tune"),
        ("slice_shape", "tune"),
        ("layout", "step"),
        ("data_parallel", "step tune"),
        ("zero_stage", "step tune"),
        ("chips", "step"),
        ("batch", "step tune"),
        ("microbatches", "step tune"),
        ("layers", "step"),
        ("recompute", "step tune"),
        ("prefetch", "gemm step tune"),
        ("dataflows", "step tune"),
        ("transposes", "step tune"),
        ("slices", "step tune"),
        ("memory_bytes_per_chip", "step tune"),
        ("memory_capacity_bytes", "step"),
        ("memory_shortfall_bytes", "step"),
        ("memory_feasible", "step tune"),
        ("feasible", "step tune"),
        ("flops_per_chip", "gemm"),
        ("group_size", "collective"),
        ("groups", "collective"),
        ("unit_bytes", "collective"),
        ("chunks", "collective"),
        ("schedule", "collective"),
        ("bytes_sent", "collective gemm"),
        ("bytes_sent_per_layer", "step"),
        ("max_link_bytes", "collective gemm"),
        ("max_link_utilisation", "collective gemm step"),
        ("transfers", "collective gemm"),
        ("events", "collective gemm"),
        ("max_abs_error", "gemm"),
        ("evaluated", "tune"),
        ("simulated", "tune"),
        ("steps_simulated", "tune"),
        ("search_space", "tune"),
    ))
_FROM_BEST = frozenset({"step_time_s", "estimate_step_s", "compute_s", "exposed_comm_s", "exposed_data_comm_s",
                        "mfu", "hfu", "tokens_per_s", "seconds_per_sequence", "fidelity", "mesh", "slice_shape",
                        "data_parallel", "dataflows", "transposes", "slices", "memory_bytes_per_chip",
                        "memory_feasible", "feasible"})
"""Fields of a tune point taken from its ``best`` choice: the configuration that ran, with its resolved fidelity
(the tune result's own ``fidelity`` is the one requested, already in ``point.fidelity``)."""


def _result_names(kinds: Iterable[str]) -> list[str]:
    wanted = set(kinds)
    return [name for name, owners in _RESULT_COLUMNS if owners & wanted]


def _result_columns(kinds: Iterable[str]) -> list[str]:
    columns: list[str] = []
    for name in _result_names(kinds):
        columns.extend(_per_layer(name, None) if name in PER_LAYER else [name])
    return columns


def _result_cells(kind: str, result: dict[str, Any]) -> dict[str, Any]:
    found = result.get("best")
    best: dict[str, Any] = found if isinstance(found, dict) else {}
    cells: dict[str, Any] = {}
    for name in _result_names([kind]):
        source = best if kind == "tune" and name in _FROM_BEST else result
        value = source.get(name)
        if name in PER_LAYER:
            cells.update(_per_layer(name, value if isinstance(value, list) else None))
        else:
            cells[name] = value
    return cells


def csv_columns(points: list[dict[str, Any]], leading: list[str]) -> list[str]:
    """The columns of a run's CSV, given its points' settings: ``index``; the inputs, those of the keys in
    ``leading`` (the swept ones) first; the result fields of the kinds present; ``error``."""
    inputs: dict[str, str] = {}  # column -> the input field it comes from
    for settings in points:
        for name, cells in input_cells(settings).items():
            inputs.update(dict.fromkeys(cells, name))
    first: list[str] = []
    for key in leading:
        top = key.split(".")[0]
        first.extend(c for c, name in inputs.items()
                     if c not in first and (c == INPUT + key or (name == top and "." not in key)))
    rest = [c for c in inputs if c not in first]
    kinds = dict.fromkeys(str(settings.get("kind", "step")) for settings in points)
    return ["index", *first, *rest, *_result_columns(kinds), "error"]


def row_of(index: int, settings: dict[str, Any], outcome: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    """The CSV row of one point, one cell per column (``None`` where it has nothing: an empty cell)."""
    cells: dict[str, Any] = {"index": index}
    for found in input_cells(settings).values():
        cells.update(found)
    cells.update(_result_cells(str(settings.get("kind", "step")), outcome.get("result") or {}))
    cells["error"] = outcome.get("error") or NO_ERROR
    # names of the shared vocabulary are str enums: kept as plain text in rows and in results.json
    return {column: str(cells[column]) if isinstance(cells.get(column), str) else cells.get(column)
            for column in columns}


def tidy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table rows (a reproduction family's) under the rules of ``results.csv``: a per-FF-layer list (``PER_LAYER``)
    one column per layer, any other list one cell of space-separated items, and a text column's missing cells
    ``none`` (an ``error`` of a row that has none, too), so that a plain ``pandas.read_csv`` reads every column
    as one dtype."""
    flat: list[dict[str, Any]] = []
    for row in rows:
        cells: dict[str, Any] = {}
        for name, value in row.items():
            if name in PER_LAYER and (value is None or isinstance(value, list | tuple)):
                cells.update(_per_layer(name, value))
            elif isinstance(value, list | tuple):
                # an item not set (a slice count an algorithm does not take) reads none, never Python's None
                cells[name] = " ".join(NONE if item is None else str(item) for item in value) or NONE
            else:
                cells[name] = value
        flat.append(cells)
    text = {name for cells in flat for name, value in cells.items() if isinstance(value, str)}
    text.add("error")
    return [{name: NONE if name in text and value in (None, "") else value for name, value in cells.items()}
            for cells in flat]
