"""The command line starts light: plotting, dataframes, cluster libraries, progress bars and graph libraries are
imported only by the commands that use them, never by ``tpusim.cli.main`` itself nor by a small collective; and
``--version``, ``--help`` or a mistyped command import no simulation at all (no numpy, SimPy, pydantic or YAML).

Each check runs in a fresh interpreter, since this test session has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("matplotlib", "pandas", "dask", "distributed", "tqdm", "networkx")
COLLECTIVE = ["collective", "--hardware", "tpuv4", "--topology", "torus:16", "--mesh", "1x16", "--axis", "1",
              "--op", "all-gather", "--bytes", "64MB", "--json"]
SIMULATION = ("numpy", "simpy", "pydantic", "yaml", "tpusim.config", "tpusim.engine.simulation",
              "tpusim.collectives", "tpusim.experiments")
"""What a command that simulates nothing must not load: the libraries and layers behind every simulation."""


def _heavy_modules(code: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules under ``heavy`` loaded once ``code`` has run in a fresh interpreter (printed as its last line)."""
    loaded = f"sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in {heavy!r}))"
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(json.dumps({loaded}))"],
                          capture_output=True, text=True, check=True)
    modules: list[str] = json.loads(done.stdout.splitlines()[-1])
    return modules


def _after_main(argv: list[str], status: int) -> str:
    """Code that runs ``main(argv)``, its output swallowed, and checks that it ended with ``status``."""
    return ("import contextlib, io, json\nfrom tpusim.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    try:\n        status = main({argv!r})\n    except SystemExit as done:\n        status = done.code\n"
            f"assert status == {status!r}, status")


@pytest.mark.slow
def test_importing_the_command_line_imports_no_heavy_library() -> None:
    assert _heavy_modules("import json, tpusim.cli.main") == []


@pytest.mark.slow
def test_parsing_a_collective_imports_no_heavy_library() -> None:
    code = f"import json\nfrom tpusim.cli.main import build_parser\nbuild_parser().parse_args({COLLECTIVE!r})"
    assert _heavy_modules(code) == []


@pytest.mark.slow
def test_running_a_small_collective_imports_no_heavy_library() -> None:
    code = ("import contextlib, io, json\nfrom tpusim.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()) as out:\n    status = main({COLLECTIVE!r})\n"
            "assert status == 0 and json.loads(out.getvalue())['op'] == 'all-gather', out.getvalue()")
    assert _heavy_modules(code) == []


@pytest.mark.parametrize(("argv", "status"), [(["--version"], 0), (["--help"], 0), (["stpe"], 2)],
                         ids=["version", "help", "mistyped"])
def test_a_command_that_simulates_nothing_imports_no_simulation(argv: list[str], status: int) -> None:
    assert _heavy_modules(_after_main(argv, status), SIMULATION) == []


def test_naming_a_command_imports_only_what_its_flags_need() -> None:
    loaded = _heavy_modules(_after_main(["schema", "--help"], 0), ("tpusim.cli",))
    assert loaded == ["tpusim.cli", "tpusim.cli.common", "tpusim.cli.main", "tpusim.cli.progress", "tpusim.cli.run"]


def test_the_checks_see_a_heavy_import() -> None:
    # the probe itself must be able to fail: a command that does plot is caught
    assert "matplotlib" in _heavy_modules("import json, matplotlib")
    assert "simpy" in _heavy_modules(_after_main(["collective", "--help"], 0), SIMULATION)


def test_every_command_is_given_its_flags_by_the_module_named_for_it() -> None:
    from importlib import import_module

    from tpusim.cli.main import COMMANDS, command_parser

    modules = {module for module, _ in COMMANDS.values()}
    routed = {(module, name) for module in modules for name in import_module(f"tpusim.cli.{module}").COMMANDS}
    assert routed == {(module, name) for name, (module, _) in COMMANDS.items()}
    assert all(callable(command_parser(name).get_default("handler")) for name in COMMANDS)
