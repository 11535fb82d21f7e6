"""The contract test (tests/gemm/test_contract.py) covers plug-ins too, and can fail: run in a fresh pytest with
``TPUSIM_PLUGINS`` naming an example plug-in (tests/plugins), restricted to that plug-in's cases, it fails for
``wrong_alg`` (a product scaled by 1.5) and passes for ``my_alg``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "tests/gemm/test_contract.py"
CASES = 3 * 2 * 5 * 2  # dataflows x layouts x meshes x networks: every case of one algorithm


def _contract(module: str, algorithm: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TPUSIM_PLUGINS": module,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "plugins")])}
    return subprocess.run([sys.executable, "-m", "pytest", CONTRACT, "-q", "-p", "no:cacheprovider", "-k",
                           f"{algorithm} and not builtin", "-o", "addopts="], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_wrong_product_fails_the_contract() -> None:
    done = _contract("wrong_alg", "wrong-alg")
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout
    assert f"{CASES} failed" in done.stdout.splitlines()[-1]  # every case: the error is in every product
    assert "max_abs_error" in done.stdout


def test_a_correct_plugin_passes_the_contract() -> None:
    done = _contract("my_alg", "my-alg")
    assert done.returncode == pytest.ExitCode.OK, done.stdout
    assert done.stdout.splitlines()[-1].startswith(f"{CASES} passed")
