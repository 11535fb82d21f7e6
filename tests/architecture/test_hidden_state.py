"""Two rules the code keeps by construction, checked over the source: only the network implementations and the
profile loader ask which kind a hardware profile is, and no module keeps a mutable cache at module level."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "tpusim"
MODULES = sorted(ROOT.rglob("*.py"))
KIND_AWARE = {"collectives/factory.py", "collectives/physical/network.py", "collectives/calibrated/network.py",
              "hardware/profiles.py", "config/hardware.py"}
PROFILE_KINDS = {"CalibratedProfile", "PhysicalProfile"}
KIND_ONLY = {"calibration", "calibrated", "ici"}  # what only one kind of profile has
REGISTRIES = {("gemm/registry.py", "_ALGORITHMS")}  # explicit registries: a name added once, never evicted


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def kind_tests(tree: ast.AST) -> list[str]:
    """Where a module asks whether a profile is physical or calibrated."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            values = [node.left, *node.comparators]
            if any(isinstance(v, ast.Constant) and v.value in ("calibrated", "physical") for v in values):
                found.append(f"line {node.lineno}: compares with a profile kind")
        elif isinstance(node, ast.Name) and node.id in PROFILE_KINDS:
            found.append(f"line {node.lineno}: names {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in KIND_ONLY:
            found.append(f"line {node.lineno}: reads .{node.attr}")
    return found


def mutable_state(tree: ast.Module, name: str) -> list[str]:
    """Module-level mutable containers (other than declared registries) and memoising decorators."""
    found = []
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, ast.AnnAssign) else [])
        labels = [ast.unparse(t) for t in targets]
        if value is None or all(label == "__all__" for label in labels):
            continue
        literal = isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp)
        called = isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in (
            "dict", "list", "set", "OrderedDict", "defaultdict", "TimingCache", "Context", "deque")
        if (literal or called) and not any((name, label) in REGISTRIES for label in labels):
            found.append(f"line {node.lineno}: {', '.join(labels)} is a mutable module-level container")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                if any(word in ast.unparse(decorator) for word in ("cache", "lru_cache", "memoize")):
                    found.append(f"line {node.lineno}: {node.name} is memoised at module level")
    return found


@pytest.mark.parametrize("path", [p for p in MODULES if _name(p) not in KIND_AWARE], ids=_name)
def test_only_the_networks_and_the_loader_ask_the_profile_kind(path: Path) -> None:
    assert kind_tests(ast.parse(path.read_text())) == []


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_module_level_mutable_cache(path: Path) -> None:
    assert mutable_state(ast.parse(path.read_text()), _name(path)) == []


def test_the_checks_catch_what_they_look_for() -> None:
    asking = ast.parse("if hardware.kind == 'calibrated':\n    x = hardware.calibration\n"
                       "isinstance(h, PhysicalProfile)")
    assert len(kind_tests(asking)) == 3
    caching = ast.parse("import functools\n_SEEN = {}\n@functools.cache\ndef f(x): return x\n")
    assert len(mutable_state(caching, "any.py")) == 2
