"""Run state has one owner and the network model is built in few places, checked over the source.

Every attribute of a tpusim class is first assigned in ``__init__`` (or ``__post_init__``, or declared in the class
body): nothing is created lazily (``getattr(self, "_x", None)`` then ``self._x = ...``), so an object's state is
what its constructor says. What one run changes belongs to its ``Simulation`` (tpusim/engine/simulation.py), and
the network model (tpusim/collectives/network.py) is frozen, so one model serves every run of a request. The
counts of places that build a model and of functions that take both a hardware profile and a mapping may only
go down (docs/network.md#the-model-and-the-run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "tpusim"
MODULES = sorted(ROOT.rglob("*.py"))
CONSTRUCTORS = {"__init__", "__post_init__"}
MODEL_FACTORIES = {"network_for"}  # the calls that build a network model
MODEL_SITES = 2  # today's count of calls to them in tpusim; lower it when a site goes
HARDWARE_AND_MAPPING = 1  # today's count of functions taking both (the factory); lower it when one goes


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _self_targets(function: ast.AST) -> list[tuple[str, int]]:
    """(attribute, line) of every ``self.attribute`` assigned in ``function``."""
    found = []
    for node in ast.walk(function):
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for target in targets:
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                        and part.value.id == "self"):
                    found.append((part.attr, node.lineno))
    return found


def lazy_attributes(tree: ast.AST) -> list[str]:
    """Attributes first assigned outside a constructor, and ``getattr(self, name, default)`` look-ups."""
    found = []
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        declared = {target.id for statement in cls.body if isinstance(statement, ast.AnnAssign | ast.Assign)
                    for target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target])
                    if isinstance(target, ast.Name)}
        methods = [m for m in cls.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
        for method in methods:
            if method.name in CONSTRUCTORS:
                declared |= {name for name, _ in _self_targets(method)}
        for method in methods:
            if method.name not in CONSTRUCTORS:
                found += [f"line {line}: {cls.name}.{name} first assigned in {method.name}"
                          for name, line in _self_targets(method) if name not in declared]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) == 3 and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
            found.append(f"line {node.lineno}: getattr(self, ..., default) creates state lazily")
    return found


def model_sites(tree: ast.AST) -> list[int]:
    """Lines that build a network model."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in MODEL_FACTORIES]


def hardware_and_mapping(tree: ast.AST) -> list[str]:
    """Functions with both a ``hardware`` and a ``mapping`` parameter."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = {a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs}
            if {"hardware", "mapping"} <= names:
                found.append(f"line {node.lineno}: {node.name}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=_name)
def test_no_attribute_is_created_outside_the_constructor(path: Path) -> None:
    assert lazy_attributes(ast.parse(path.read_text())) == []


def test_the_network_model_is_built_in_few_places() -> None:
    sites = {_name(p): model_sites(ast.parse(p.read_text())) for p in MODULES}
    found = [f"{name}:{line}" for name, lines in sites.items() for line in lines]
    assert len(found) <= MODEL_SITES, found


@pytest.mark.slow
def test_few_functions_take_both_hardware_and_mapping() -> None:
    found = [f"{_name(p)} {where}" for p in MODULES for where in hardware_and_mapping(ast.parse(p.read_text()))]
    assert len(found) <= HARDWARE_AND_MAPPING, found


def test_the_checks_catch_what_they_look_for() -> None:
    lazy = ast.parse(
        "class Net:\n"
        "    def __init__(self):\n        self.kept = 1\n"
        "    @property\n"
        "    def links(self):\n"
        "        found = getattr(self, '_links', None)\n"
        "        if found is None:\n            found = self._links = 2\n"
        "        self.kept = 3\n"
        "        return found\n")
    assert len(lazy_attributes(lazy)) == 2  # the getattr look-up and the assignment, not the declared ``kept``
    building = ast.parse("a = network_for(h, m)\nb = tpusim.collectives.network.network_for(h, m)\nc = other(h)\n")
    assert model_sites(building) == [1, 2]
    taking = ast.parse("def f(hardware, mapping): ...\ndef g(hardware, *, mapping=None): ...\ndef h(hardware): ...\n")
    assert len(hardware_and_mapping(taking)) == 2
