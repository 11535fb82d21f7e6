"""The command line starts light: plotting, dataframes, cluster libraries, progress bars and graph libraries are
imported only by the commands that use them, never by ``tpusim.cli.main`` itself nor by a small collective.

Each check runs in a fresh interpreter, since this test session has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("matplotlib", "pandas", "dask", "distributed", "tqdm", "networkx")
COLLECTIVE = ["collective", "--hardware", "tpuv4", "--topology", "torus:16", "--mesh", "1x16", "--axis", "1",
              "--op", "all-gather", "--bytes", "64MB", "--json"]
LOADED = f"sorted(m for m in sys.modules if m.split('.')[0] in {set(HEAVY)!r})"


def _heavy_modules(code: str) -> list[str]:
    """The heavy modules loaded once ``code`` has run in a fresh interpreter (printed as its last line)."""
    done = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(json.dumps({LOADED}))"],
                          capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_importing_the_command_line_imports_no_heavy_library() -> None:
    assert _heavy_modules("import json, tpusim.cli.main") == []


def test_parsing_a_collective_imports_no_heavy_library() -> None:
    code = f"import json\nfrom tpusim.cli.main import build_parser\nbuild_parser().parse_args({COLLECTIVE!r})"
    assert _heavy_modules(code) == []


def test_running_a_small_collective_imports_no_heavy_library() -> None:
    code = ("import contextlib, io, json\nfrom tpusim.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()) as out:\n    status = main({COLLECTIVE!r})\n"
            "assert status == 0 and json.loads(out.getvalue())['op'] == 'all-gather', out.getvalue()")
    assert _heavy_modules(code) == []


def test_the_checks_see_a_heavy_import() -> None:
    # the probe itself must be able to fail: a command that does plot is caught
    assert "matplotlib" in _heavy_modules("import json, matplotlib")
