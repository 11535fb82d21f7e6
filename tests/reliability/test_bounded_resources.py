"""Bounded resources: size limits checked before any work, YAML and file bombs refused, every number finite.

Requests and files that used to grow without bound (gigabytes of memory, segfaults, hangs) run in a subprocess
under a 2 GiB address-space limit and must exit 2 with one line on stderr; the subprocess timeout is only a
safety net. Checks that cannot run away are made in-process. docs/limits.md describes every limit.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.reliability.files import TINY_GEMM_POINT
from tpusim import api
from tpusim.cli.main import main
from tpusim.config import Point
from tpusim.config.catalog import HARDWARE
from tpusim.errors import ConfigError, NonFiniteError, UserError
from tpusim.experiments import spec as spec_module
from tpusim.experiments.spec import expand, load_experiment
from tpusim.limits import LIMITS, LimitError, limit_of
from tpusim.topology import parse_topology

MEMORY_LIMIT = 2 * 2**30
SAFETY_TIMEOUT_S = 60  # never reached by a passing test; a regression fails instead of hanging the suite

GEMM = ["gemm", "--hardware", "meshslice-sim", "--mesh", "2x2", "--algorithm", "summa", "--dataflow", "os"]
STEP = ["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--algorithm", "meshslice"]
ALL_GATHER = ["collective", "--hardware", "tpuv4", "--axis", "0", "--op", "all-gather", "--bytes", "64MB"]
POINT = TINY_GEMM_POINT
HUGE = str(2**1100)  # 332 digits: beyond any float


_MAIN = "import sys; from tpusim.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _tpusim(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``tpusim ARGS`` in a fresh interpreter limited to 2 GiB of address space."""
    return subprocess.run([sys.executable, "-c", _MAIN, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=SAFETY_TIMEOUT_S, preexec_fn=_limit_memory, env={**os.environ, **(env or {})},
                          check=False)


def _refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a run that must exit 2 with nothing on stdout."""
    lines = done.stderr.splitlines()
    assert (done.returncode, done.stdout, len(lines)) == (2, "", 1), done.stderr[-2000:]
    return lines[0]


def _strict_json(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------------------------- size limits

CHIPS_LIMIT = "exceeds the limit of 65536 chips (of a mesh, a topology or a tuning run); valid: up to 65536 " \
              "(raise it with TPUSIM_LIMITS_CHIPS=N, see docs/limits.md)"

TRACE_CHIPS_LIMIT = ("trace chips: chip list '0-1000000000' names chip 1000000000, beyond any mesh within the limit "
                     "of 65536 chips; valid: chip ids 0-65535 of the traced mesh (raise the limit with "
                     "TPUSIM_LIMITS_CHIPS=N, see docs/limits.md)")

OVERSIZED = [
    pytest.param([*STEP, "--chips", "1000000000", "--mesh", "32x31250000", "--slices", "1"],
                 f"mesh '32x31250000' has 1000000000 chips, which {CHIPS_LIMIT}", id="step-billion-chips"),
    pytest.param([*ALL_GATHER, "--topology", "mesh:1000000x1", "--mesh", "1000000x1"],
                 f"mesh '1000000x1' has 1000000 chips, which {CHIPS_LIMIT}", id="collective-million-chip-mesh"),
    pytest.param([*ALL_GATHER, "--topology", "torus:65536x65536", "--mesh", "16x16"],
                 f"topology 'torus:65536x65536' has 4294967296 chips, which {CHIPS_LIMIT}", id="huge-torus"),
    pytest.param([*ALL_GATHER, "--topology", "4x4x4", "--mesh", "8x8", "--chunks", "100000"],
                 "--chunks '100000' exceeds the limit of 4096 pipelined chunks per message; valid: up to 4096 "
                 "(raise it with TPUSIM_LIMITS_CHUNKS=N, see docs/limits.md)", id="chunks"),
    pytest.param([*GEMM, "--m", "4096", "--n", "4096", "--k", "4096", "--slices", "100000000"],
                 "--slices '100000000' exceeds the limit of 4096 MeshSlice slices", id="gemm-slices"),
    pytest.param([*GEMM, "--m", "100000", "--n", "100000", "--k", "100000", "--verify"],
                 "verify of M=100000 N=100000 K=100000 needs 240000000000 bytes of operands, which exceeds the "
                 "limit of 268435456 bytes of float64 --verify operands", id="verify-payload"),
    pytest.param(["tune", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "1000000000"],
                 f"--chips '1000000000' {CHIPS_LIMIT}", id="tune-billion-chips"),
    pytest.param([*STEP, "--chips", "256", "--mesh", "16x16", "--batch", "1000000000000"],
                 "--batch '1000000000000' exceeds the limit of 1048576 sequences of a global batch; valid: up to "
                 "1048576 (raise it with TPUSIM_LIMITS_BATCH=N, see docs/limits.md)", id="step-batch"),
    pytest.param(["tune", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "256", "--batch", "2000000"],
                 "--batch '2000000' exceeds the limit of 1048576 sequences of a global batch", id="tune-batch"),
    *(pytest.param([*argv, trace, "t.json", "--trace-chips", "0-1000000000"], TRACE_CHIPS_LIMIT,
                   id=f"trace-chips-{name}")
      for name, argv, trace in [("gemm", [*GEMM, "--m", "64", "--n", "64", "--k", "64"], "--trace"),
                                ("step", [*STEP, "--mesh", "4x4"], "--trace"),
                                ("tune", ["tune", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "16"],
                                 "--trace-best")]),
    pytest.param([*GEMM, "--m", HUGE, "--n", "64", "--k", "64"],
                 f"--m '{HUGE[:39]}... (334 characters) exceeds the limit of 16777216 elements along a GeMM "
                 "dimension", id="m-beyond-float"),
]


@pytest.mark.parametrize(("argv", "needle"), OVERSIZED)
@pytest.mark.slow
def test_oversized_request_is_refused_before_any_work(argv: list[str], needle: str, tmp_path: Path) -> None:
    assert needle in _refused(_tpusim(argv, tmp_path))


def test_limit_is_raised_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    gemm = {"hardware": "meshslice-tpu-fit", "mesh": "2x2", "algorithm": "summa", "dataflow": "os", "n": 64,
            "k": 64}
    monkeypatch.setenv("TPUSIM_LIMITS_GEMM_DIM", "32")
    with pytest.raises(LimitError, match=r"^m 64 exceeds the limit of 32 elements along a GeMM dimension .*"
                                         r"TPUSIM_LIMITS_GEMM_DIM=N"):
        api.gemm(**gemm, m=64)
    monkeypatch.setenv("TPUSIM_LIMITS_GEMM_DIM", "64")
    assert api.gemm(**gemm, m=64).m == 64
    monkeypatch.setenv("TPUSIM_LIMITS_CHIPS", "32")
    with pytest.raises(LimitError, match="topology 'torus:8x8' has more chips than the limit: it exceeds the "
                                         "limit of 32 chips"):
        parse_topology("torus:8x8")
    monkeypatch.setenv("TPUSIM_LIMITS_CHIPS", "lots")
    with pytest.raises(LimitError, match=r"^TPUSIM_LIMITS_CHIPS 'lots' must be an integer >= 1"):
        limit_of("chips")


def test_every_limit_is_documented() -> None:
    text = (Path(__file__).parents[2] / "docs" / "limits.md").read_text()
    for limit in LIMITS.values():
        assert f"`{limit.env}`" in text and f"{limit.default}" in text.replace(",", ""), limit.env


def test_integer_beyond_a_float_is_a_user_error_not_an_overflow() -> None:
    with pytest.raises(UserError, match=r"^bytes: size 135829852904938584927735\.\.\. \(332 digits\) is too large"):
        api.collective(hardware="tpuv4", topology="4x4x4", mesh="8x8", axis=0, op="all-gather", bytes=2**1100)
    with pytest.raises(UserError, match=r"^bytes_per_param .* must be a finite number > 0"):
        api.step(model="gpt3-175b", hardware="meshslice-sim", mesh="16x16", bytes_per_param=2**1100)


def test_sweep_with_a_value_beyond_a_float_is_refused_before_its_first_point(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("name: huge\n" + POINT + f"sweep:\n  grid:\n    m: [64, {HUGE}]\n")
    with pytest.raises(ConfigError, match=r"\(sweep point 1\): m: 1358.*exceeds the limit of 16777216"):
        expand(load_experiment(path), str(path))


# ---------------------------------------------------------------------------------------------- YAML and files


def _laughs(levels: int = 9) -> str:
    """Nested anchors under sweep.exclude: a few hundred bytes that expand to 9**levels strings."""
    lines = ["name: bomb", POINT.rstrip(), "sweep:", "  exclude:", '    - a: &a ["lol","lol","lol","lol","lol",'
             '"lol","lol","lol","lol"]']
    for previous, name in zip("abcdefghi", "bcdefghij"[: levels - 1], strict=False):
        lines.append(f"    - {name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_billion_laughs_is_refused_while_composing(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(_laughs())
    assert len(_laughs()) < 700
    line = _refused(_tpusim(["run", "bomb.yaml", "--out", "out"], tmp_path))
    assert line.startswith("bomb.yaml:19: the YAML expands to 5380840 ")
    assert line.endswith("nodes (aliases counted at every use), which exceeds the limit of 1000000 YAML nodes after "
                         "expanding aliases; valid: up to 1000000 (raise it with TPUSIM_LIMITS_YAML_NODES=N, see "
                         "docs/limits.md)")


def test_modest_aliases_still_load(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text("name: anchors\npoint: &p\n" + POINT.split("\n", 1)[1] + "sweep:\n  include:\n    - *p\n")
    assert [point.m for point in expand(load_experiment(path))] == [64]


@pytest.mark.slow
def test_grid_is_sized_before_expansion(tmp_path: Path) -> None:
    values = ",".join(str(64 + i) for i in range(1000))
    (tmp_path / "grid.yaml").write_text("name: grid\n" + POINT + f"sweep:\n  grid:\n    m: [{values}]\n"
                                        f"    n: [{values}]\n")
    assert _refused(_tpusim(["run", "grid.yaml", "--out", "out", "--yes"], tmp_path)) == (
        "grid.yaml: the sweep has 1000000 points, which exceeds the limit of 100000 points of a sweep (grid "
        "product plus include); valid: up to 100000 (raise it with TPUSIM_LIMITS_SWEEP_POINTS=N, see "
        "docs/limits.md)")


def test_max_points_is_checked_before_any_point_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("wide.yaml").write_text("name: wide\nmax_points: 4\n" + POINT + "sweep:\n  grid:\n    m: [64, 128, 192]\n"
                                 "    n: [64, 128, 192]\n  exclude:\n    - m: 64\n")
    built: list[object] = []
    real_validate: Callable[..., Any] = spec_module.validate

    def validate(model: Any, *rest: Any) -> Any:
        if model is Point:
            built.append(rest)
        return real_validate(model, *rest)

    monkeypatch.setattr(spec_module, "validate", validate)
    with pytest.raises(UserError, match=r"^wide\.yaml: the sweep has 9 points before exclude, above its max_points "
                                        r"of 4; rerun with --yes to run them all$"):
        api.run_experiment("wide.yaml", "out")
    assert built == []


@pytest.mark.parametrize(("target", "needle"), [
    ("/dev/zero", "cannot read experiment file '/dev/zero': not a regular file (a device, FIFO or socket); valid: "
                  "a YAML file"),
    ("./fifo", "cannot read experiment file 'fifo': not a regular file (a device, FIFO or socket); valid: a YAML "
               "file"),
    ("./loop.yaml", "cannot read experiment file 'loop.yaml': Too many levels of symbolic links"),
])
@pytest.mark.slow
def test_special_files_are_refused_without_reading(target: str, needle: str, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # opened for reading, a FIFO without a writer would block forever
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    assert _refused(_tpusim(["run", target, "--out", "out"], tmp_path)) == needle


def test_file_larger_than_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: big\n" + POINT + "description: '" + "x" * 2000 + "'\n")
    monkeypatch.setenv("TPUSIM_LIMITS_FILE_BYTES", "1024")
    with pytest.raises(LimitError, match=r"^experiment file '.*big\.yaml' is larger than the limit: its size "
                                         r"exceeds the limit of 1024 bytes of a YAML file"):
        load_experiment(path)


@pytest.mark.slow
def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    (tmp_path / "deep.yaml").write_text("name: deep\nx: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert _refused(_tpusim(["run", "deep.yaml", "--out", "out"], tmp_path)) == (
        "deep.yaml:2: collections nested more than 64 deep; valid: at most 64 levels")


@pytest.mark.slow
def test_long_base_chain_is_refused(tmp_path: Path) -> None:
    (tmp_path / "p0.yaml").write_text((HARDWARE.root() / "tpuv4.yaml").read_text()
                                      .replace("name: tpuv4", "name: p0"))
    for level in range(1, 1200):
        (tmp_path / f"p{level}.yaml").write_text(f"name: p{level}\nbase: p{level - 1}.yaml\n")
    assert _refused(_tpusim([*GEMM, "--hardware", "p1199.yaml", "--m", "64", "--n", "64", "--k", "64"],
                            tmp_path)) == (
        "p1199.yaml: base: a chain of more than 16 profiles (p1199 -> p1198 -> p1197 -> ... -> p1184 -> p1183); "
        "valid: at most 16 profiles from a file to its last base")


# ---------------------------------------------------------------------------------------------- finite output


def test_analytic_json_has_null_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*GEMM, "--mesh", "4x4", "--algorithm", "meshslice", "--m", "4096", "--n", "4096", "--k", "4096",
                 "--fidelity", "analytic", "--json"]) == 0
    result = _strict_json(capsys.readouterr().out)
    assert [result[key] for key in ("compute_s", "exposed_comm_s", "idle_s", "hbm_stall_s")] == [None] * 4
    assert result["time_s"] == result["analytic_time_s"] > 0


def test_absurd_peak_flops_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    Path("tiny.yaml").write_text("name: tiny\ndescription: absurd\nbase: meshslice-sim\nchip:\n  peak_flops: 1e-300\n")
    assert main([*GEMM, "--hardware", "tiny.yaml", "--m", "4096", "--n", "4096", "--k", "4096", "--json"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "tiny.yaml: chip.peak_flops: compute rate 1e-300 is outside the range of any real "
                              "device; valid: >= 1e+06 FLOP/s\n")


@pytest.mark.parametrize(("argv", "needle"), [
    pytest.param([*GEMM, "--m", "4096", "--n", "4096", "--k", "4096", "--scale-flops", "1e-320", "--json"],
                 # every panel count overflows; the smallest, one panel, is the one run and named
                 "the result's time_s came out inf: an input makes the times overflow a float; look at scale.flops "
                 "1e-320, m/n/k 4096/4096/4096, hardware meshslice-sim", id="gemm-flops"),
    pytest.param(["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--algorithm", "summa", "--mesh", "4x4",
                  "--ignore-memory", "--slow-link", "x:1e308", "--json"],
                 "the result's step_time_s came out inf: an input makes the times overflow a float; look at "
                 "slow-link x:1e308, model gpt3-175b, hardware tpuv4", id="step-slow-link"),
    pytest.param(["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--algorithm", "summa", "--mesh", "4x4",
                  "--ignore-memory", "--scale-flops", "3.6e-315"],  # peak_flops about 1e-300: this step used to hang
                 "a simulated transfer's time came out inf: an input makes the times overflow a float; look at "
                 "scale.flops 3.6e-315, model gpt3-175b, hardware tpuv4", id="step-hang"),
    pytest.param([*ALL_GATHER, "--topology", "4x4x4", "--mesh", "8x8", "--scale-beta", "1e-320", "--json"],
                 "a simulated transfer's time came out inf: an input makes the times overflow a float; look at "
                 "scale.beta 1e-320, bytes 64MB, hardware tpuv4", id="collective-bandwidth"),
])
@pytest.mark.slow
def test_overflowing_inputs_are_named_not_printed_as_nan(argv: list[str], needle: str, tmp_path: Path) -> None:
    assert _refused(_tpusim(argv, tmp_path)).startswith(needle)


SCALES = ["alpha", "lambda", "beta", "flops", "hbm", "step", "op", "vector", "dma", "dcn"]
TPU_GEMM = ["gemm", "--hardware", "tpuv4", "--mesh", "2x2", "--algorithm", "collective", "--dataflow", "os", "--m",
            "256", "--n", "256", "--k", "256", "--json"]
TPU_STEP = ["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--algorithm", "summa", "--mesh", "4x4",
            "--ignore-memory", "--json"]


def _finite_or_refused(argv: list[str], capsys: pytest.CaptureFixture[str], key: str) -> None:
    status = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and status in (0, 2), err  # never an OverflowError (exit 1)
    if status == 2:
        assert out == "" and len(err.splitlines()) == 1
        return
    result = _strict_json(out)  # every number finite: NaN and Infinity are refused by the parser
    assert 0 < result[key] < float("inf")


@pytest.mark.parametrize("value", ["1e-308", "1e308"])
@pytest.mark.parametrize("scale", SCALES)
def test_an_extreme_scale_factor_is_a_finite_result_or_one_line(scale: str, value: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    _finite_or_refused([*TPU_GEMM, f"--scale-{scale}", value], capsys, "time_s")


@pytest.mark.parametrize("scale", ["vector", "flops", "hbm"])
@pytest.mark.slow
def test_a_tiny_scale_factor_of_a_step_is_a_finite_result_or_one_line(scale: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _finite_or_refused([*TPU_STEP, f"--scale-{scale}", "1e-308"], capsys, "step_time_s")


def test_results_json_stays_json_when_a_point_overflows(tmp_path: Path) -> None:
    path = tmp_path / "overflow.yaml"
    path.write_text("name: overflow\n" + POINT + "sweep:\n  grid:\n    scale.flops: [1, 1e-320]\n")
    api.run_experiment(path, tmp_path / "out")
    points = _strict_json((tmp_path / "out" / "results.json").read_text())["points"]
    assert points[0]["error"] is None and points[0]["result"]["time_s"] > 0
    assert points[1]["error"].startswith("the result's time_s came out inf: an input makes the times overflow")


@pytest.mark.slow
def test_nan_time_in_the_event_loop_ends_it() -> None:
    with pytest.raises(NonFiniteError, match="a simulated transfer's time came out inf"):
        api.collective(hardware="tpuv4", topology="4x4x4", mesh="8x8", axis=0, op="all-gather", bytes="64MB",
                       scale={"beta": 1e-320})


@pytest.mark.slow
def test_a_profile_chunk_cap_beyond_the_limit_is_refused(tmp_path: Path) -> None:
    from tpusim.config.catalog import HARDWARE

    text = HARDWARE.resolve("tpuv4").read_text()
    assert "max_chunks: 256" in text
    (tmp_path / "big.yaml").write_text(text.replace("max_chunks: 256", "max_chunks: 1000000000"))
    argv = [*ALL_GATHER, "--hardware", str(tmp_path / "big.yaml"), "--topology", "4x4x4", "--mesh", "16x4"]
    assert "ici.max_chunks: 1000000000 exceeds the limit of 4096 pipelined chunks per message" in _refused(
        _tpusim(argv, tmp_path))


def test_trace_chips_are_bounded_before_expansion_in_the_api(tmp_path: Path) -> None:
    gemm = {"hardware": "meshslice-tpu-fit", "mesh": "2x2", "algorithm": "summa", "dataflow": "os", "m": 64,
            "n": 64, "k": 64, "trace": str(tmp_path / "t.json")}
    with pytest.raises(UserError) as info:
        api.gemm(**gemm, trace_chips="0-3,5,0-1000000000")
    assert str(info.value) == TRACE_CHIPS_LIMIT.replace("'0-1000000000'", "'0-3,5,0-1000000000'")
    with pytest.raises(UserError, match=r"^trace chips: chip 65535 does not exist on the 2x2 mesh; valid: 0-3$"):
        api.gemm(**gemm, trace_chips="65535")
    assert api.gemm(**gemm, trace_chips="0-1,3").notes[-1] == f"trace written to {tmp_path / 't.json'}"


def _string_bomb(aliases: int = 110_000, length: int = 100_000) -> str:
    """One long string anchored once and aliased ``aliases`` times: few nodes, ``aliases * length`` bytes."""
    return ("name: strings\n" + POINT + "sweep:\n  exclude:\n    - hardware: &s " + "x" * length + "\n"
            "    - hardware: [" + ",".join(["*s"] * aliases) + "]\n")


def _text_before_aliases(bomb: str) -> int:
    """Bytes of every scalar token before the alias list (the anchored string's once), as PyYAML's scanner sees
    them: the count the loader must reach before its first alias."""
    return sum(len(token.value) for token in yaml.scan(bomb.rsplit("[", 1)[0]) if isinstance(token, yaml.ScalarToken))


@pytest.mark.slow
def test_aliases_of_a_long_string_are_bounded_by_bytes(tmp_path: Path) -> None:
    bomb = _string_bomb()
    assert len(bomb) < limit_of("file_bytes") and bomb.count("*s") < limit_of("yaml_nodes")
    (tmp_path / "strings.yaml").write_text(bomb)
    before = _text_before_aliases(bomb)
    uses = (2**26 - before) // 100_000 + 1  # the first alias past 2**26 bytes
    assert _refused(_tpusim(["run", "strings.yaml", "--out", "out"], tmp_path)) == (
        f"strings.yaml:14: the YAML expands to at least {before + uses * 100_000} bytes of text (aliases counted "
        "at every "
        "use), which exceeds the limit of 67108864 bytes of YAML scalar text after expanding aliases; valid: up to "
        "67108864 (raise it with TPUSIM_LIMITS_YAML_BYTES=N, see docs/limits.md)")
    assert not (tmp_path / "out").exists()


def test_text_bound_counts_each_alias_at_its_expanded_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "small.yaml"
    bomb = _string_bomb(aliases=3, length=10)
    path.write_text(bomb)
    whole = _text_before_aliases(bomb) + 3 * 10  # the document's text, each of the three aliases in full
    monkeypatch.setenv("TPUSIM_LIMITS_YAML_BYTES", str(whole))
    assert load_experiment(path).name == "strings"
    monkeypatch.setenv("TPUSIM_LIMITS_YAML_BYTES", str(whole - 1))
    with pytest.raises(LimitError, match=rf"^.*small\.yaml:14: the YAML expands to at least {whole} bytes of text"):
        load_experiment(path)
