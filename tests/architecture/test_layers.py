"""Imports point one way: units/config -> hardware -> topology -> engine -> collectives -> gemm -> model ->
tuning -> experiments -> cli (docs/architecture.md#layers). A module may import its own layer and any layer to its
left."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "tpusim"
ORDER = ["units", "errors", "config", "hardware", "topology", "engine", "collectives", "gemm", "model",
         "tuning", "experiments", "api", "cli", "__main__"]
RANK = {name: i for i, name in enumerate(ORDER)}
RANK["errors"] = -1  # the exception hierarchy is importable from everywhere
RANK["units"] = -1
RANK["vocabulary"] = -1  # the shared names, importable from everywhere
RANK["limits"] = -1  # the size limits, importable from everywhere (it imports only errors)
RANK["files"] = -1  # the one file reader and writer, importable from everywhere (it imports errors and limits)
RANK["keys"] = -1  # the keyed digests of stored state, as low as files (it imports files and errors)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "tpusim" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


MODULES = sorted(p for p in ROOT.rglob("*.py") if p.relative_to(ROOT).parts[0] != "__init__.py")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_left(path: Path) -> None:
    own = path.relative_to(ROOT).parts[0].removesuffix(".py")
    if own not in RANK:
        pytest.fail(f"module {path} is in no known layer; add it to ORDER")
    for module in _imports(path):
        layer = _layer(module)
        if layer is None or layer == own:
            continue
        assert RANK[layer] <= RANK[own], f"{path.relative_to(ROOT)} imports {module}: {layer} is right of {own}"


def test_units_imports_nothing_of_tpusim() -> None:
    assert not [m for m in _imports(ROOT / "units.py") if m.startswith("tpusim")]


def test_a_backward_import_is_caught(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from tpusim.gemm.dataflow import Dataflow\n")
    assert _layer(_imports(bad)[0]) == "gemm" and RANK["gemm"] > RANK["engine"]
