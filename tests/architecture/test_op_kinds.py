"""Op kinds are told apart by the ops themselves (``model.op_kinds``): code that acts on every kind is a visitor, so
no module dispatches on an op's class with an ``isinstance`` chain. What is left are filters that pick one kind out
of a sequence (the GeMMs a prefetch looks ahead to, the statistics 1D parallelism moves), counted here so that a
new one is a decision. The source is read as syntax, so a test of a tuple or a union of kinds, or of a kind named
through its module, counts too; the kinds are the classes ``op_kinds`` holds to its protocols, so a new kind is
counted once it is declared, and a class that accepts a visitor must be declared."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tpusim"
KINDS_MODULE = PACKAGE / "model" / "op_kinds.py"

FILTERS = {
    "tpusim/model/plan.py": 2,  # the GeMMs a plan prepares; the LayerNorm statistics 1D parallelism moves
    "tpusim/model/program.py": 5,  # the GeMMs the data-parallel syncs and the prefetch attach to
    "tpusim/model/step.py": 1,  # a GeMM is timed through the GeMM cache
    "tpusim/tuning/layer_costs.py": 2,  # a layer's GeMMs, and the non-FF ops that are not
}


def op_kinds() -> set[str]:
    """The op classes ``op_kinds`` holds to its protocols (the tuples of classes it types ``type[...OpKind]``)."""
    names = set()
    for node in ast.walk(ast.parse(KINDS_MODULE.read_text(encoding="utf-8"))):
        if isinstance(node, ast.AnnAssign) and isinstance(node.value, ast.Tuple):
            names.update(element.id for element in node.value.elts if isinstance(element, ast.Name))
    return names


def _names_a_kind(node: ast.AST, kinds: set[str]) -> bool:
    """Whether ``node`` is an ``isinstance`` call whose class argument names an op kind (alone, in a tuple or a
    union, bare or through its module)."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
            and len(node.args) == 2):
        return False
    named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)}
    named |= {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
    return bool(named & kinds)


def kind_tests(tree: ast.AST, kinds: set[str]) -> list[int]:
    """Lines of the ``isinstance`` tests of an op kind."""
    return sorted(node.lineno for node in ast.walk(tree) if _names_a_kind(node, kinds))


def kind_chains(tree: ast.AST, kinds: set[str]) -> list[int]:
    """Lines of the ``elif`` branches that test an op kind after an ``if`` that did."""
    def tests_a_kind(test: ast.expr) -> bool:
        return any(_names_a_kind(node, kinds) for node in ast.walk(test))

    return sorted(node.orelse[0].lineno for node in ast.walk(tree)
                  if isinstance(node, ast.If) and tests_a_kind(node.test) and len(node.orelse) == 1
                  and isinstance(node.orelse[0], ast.If) and tests_a_kind(node.orelse[0].test))


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(PACKAGE.rglob("*.py"))]


def test_no_module_dispatches_on_an_op_kind_by_its_class() -> None:
    kinds = op_kinds()
    assert {name: lines for name, tree in _modules() if (lines := kind_chains(tree, kinds))} == {}


def test_the_kind_filters_left_are_the_ones_listed() -> None:
    kinds = op_kinds()
    assert {name: len(lines) for name, tree in _modules() if (lines := kind_tests(tree, kinds))} == FILTERS


def test_the_five_kinds_are_declared() -> None:
    assert op_kinds() == {"GemmOp", "LocalOp", "NormStatsOp", "DataSyncOp", "DataWaitOp"}


def test_every_class_that_accepts_a_visitor_is_a_declared_kind() -> None:
    kinds = op_kinds()
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and name != "tpusim/model/op_kinds.py" and any(
                    isinstance(item, ast.FunctionDef) and item.name == "accept" for item in node.body):
                assert node.name in kinds, f"{name}: {node.name} accepts a visitor; declare it in op_kinds"


def test_the_checks_see_a_chain_and_a_filter() -> None:
    kinds = op_kinds()
    chain = ast.parse("if isinstance(op, GemmOp):\n    pass\nelif isinstance(op, (LocalOp, layer.NormStatsOp)):\n"
                      "    pass\n")
    assert kind_chains(chain, kinds) == [3] and kind_tests(chain, kinds) == [1, 3]
    assert kind_tests(ast.parse("ahead = next(i for i in it if isinstance(sequence[i][0], GemmOp))"), kinds)
    assert kind_tests(ast.parse("isinstance(op, LocalOp | NormStatsOp)"), kinds)
    assert not kind_tests(ast.parse("isinstance(value, int)"), kinds)
