"""Bad input through the command line and the Python API: one clear message, never a traceback.

Each case runs through ``tpusim.cli.main.main`` (exit 2, nothing on stdout, one line on stderr quoting the bad
value verbatim, or two with a suggestion, no traceback) and, where a Python entry point takes the same value,
through it (the matching :class:`~tpusim.errors.TpusimError` subclass, whose ``message`` quotes the value).
Files are written into a temporary working directory and named relatively, so messages quote them as given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.reliability.files import TINY_GEMM_POINT
from tpusim import api
from tpusim.cli.main import main
from tpusim.config.catalog import HARDWARE
from tpusim.errors import (
    ConfigError,
    InfeasibleError,
    OutputPathError,
    TopologyError,
    TpusimError,
    UnknownNameError,
    UserError,
)
from tpusim.experiments.spec import load_experiment
from tpusim.hardware import load_hardware

TINY_POINT = TINY_GEMM_POINT

FILES = {
    "ok.yaml": "name: ok\n" + TINY_POINT,
    "syntax.yaml": "name: syntax\npoint:\n  kind: gemm\n  hardware: [meshslice-tpu-fit\n  mesh: 2x2\n",
    "unknown.yaml": "name: unknown\n" + TINY_POINT + "  scale:\n    bta: 2\n",
    "empty-sweep.yaml": "name: empty\n" + TINY_POINT + "sweep:\n  grid:\n    m: []\n",
    "big-sweep.yaml": "name: big\nmax_points: 2\n" + TINY_POINT + "sweep:\n  grid:\n    m: [64, 128, 256]\n",
    "locked.yaml": "name: locked\n" + TINY_POINT,
    "a-file": "not a folder\n",
}

GEMM = ["gemm", "--hardware", "meshslice-tpu-fit", "--mesh", "2x2", "--dataflow", "os", "--m", "64", "--n", "64",
        "--k", "64"]
STEP = ["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--algorithm", "meshslice"]
COLLECTIVE = ["collective", "--hardware", "tpuv4", "--topology", "4x4x4", "--mesh", "8x8", "--op", "all-gather",
              "--bytes", "64MB"]
G = {"hardware": "meshslice-tpu-fit", "mesh": "2x2", "dataflow": "os", "m": 64, "n": 64, "k": 64}
S = {"model": "gpt3-175b", "hardware": "meshslice-sim", "algorithm": "meshslice"}
C = {"hardware": "tpuv4", "topology": "4x4x4", "mesh": "8x8", "op": "all-gather", "bytes": "64MB"}
HEADS_HINT = "use --allow-infeasible to time it anyway (heads padded, marked feasible: false)"
CALIBRATED = ["collective", "--hardware", "meshslice-sim", "--mesh", "8x8", "--axis", "0", "--op", "all-gather",
              "--bytes", "64MB"]
CC = {"hardware": "meshslice-sim", "mesh": "8x8", "axis": 0, "op": "all-gather", "bytes": "64MB"}


def _hardware_with(old: str, new: str) -> str:
    text = (HARDWARE.root() / "tpuv4.yaml").read_text()
    assert old in text
    return text.replace(old, new).replace("name: tpuv4", "name: bad")


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str] | None
    """Command line (None: the value can only be given through the Python API)."""
    needle: str
    """Text of the first stderr line: the bad value verbatim (and where it is)."""
    api: Callable[[], object] | None = None
    error: type[TpusimError] | None = None
    """The exact class the API raises."""
    api_needle: str | None = None
    """Text of the API message (default: ``needle``)."""
    suggestion: str | None = None
    """The exact second line, when there is one."""
    unless: Callable[[], str | None] | None = None
    """Returns a reason to skip, checked once the files exist."""


def _root_can_read() -> str | None:
    return "chmod 000 does not stop this user (root) from reading" if os.access("locked.yaml", os.R_OK) else None


def _root_can_write() -> str | None:
    return "chmod 555 does not stop this user (root) from writing" if os.access("read-only", os.W_OK) else None


CASES = [
    # ---- files
    Case("yaml-syntax", ["run", "syntax.yaml", "--out", "out"], "syntax.yaml:5: YAML syntax error: ",
         lambda: api.run_experiment("syntax.yaml", "out"), ConfigError),
    Case("unknown-key", ["run", "unknown.yaml", "--out", "out"],
         "unknown.yaml: unknown key 'bta' at point.scale; valid keys: alpha, beta, dcn, dma, flops, hbm, lambda",
         lambda: load_experiment("unknown.yaml"), ConfigError, suggestion="did you mean 'beta'?"),
    Case("bandwidth-without-per-second", [*COLLECTIVE, "--axis", "0", "--hardware", "unit.yaml"],
         "unit.yaml: ici.link_bandwidth: bandwidth '45 GB' needs a unit per second",
         lambda: api.collective(**{**C, "hardware": "unit.yaml"}, axis=0), ConfigError),
    Case("time-of-wrong-type", [*COLLECTIVE, "--axis", "0", "--hardware", "type.yaml"],
         "type.yaml: ici.hop_latency: time [1] must be a number or a string with a unit",
         lambda: load_hardware("type.yaml"), ConfigError),
    Case("missing-experiment", ["run", "missing.yaml", "--out", "out"],
         "cannot read experiment file 'missing.yaml': No such file or directory",
         lambda: api.run_experiment("missing.yaml", "out"), ConfigError),
    Case("unreadable-experiment", ["run", "locked.yaml", "--out", "out"],
         "cannot read experiment file 'locked.yaml': Permission denied",
         lambda: api.run_experiment("locked.yaml", "out"), ConfigError, unless=_root_can_read),
    Case("output-is-a-file", ["run", "ok.yaml", "--out", "a-file"], "output path 'a-file' is a file",
         lambda: api.run_experiment("ok.yaml", "a-file"), OutputPathError),
    Case("output-not-writable", ["run", "ok.yaml", "--out", "read-only/out"],
         "output folder 'read-only/out' is not writable",
         lambda: api.run_experiment("ok.yaml", "read-only/out"), OutputPathError, unless=_root_can_write),
    Case("trace-is-a-folder", [*GEMM, "--algorithm", "summa", "--trace", "read-only"],
         "trace path 'read-only' is a directory",
         lambda: api.gemm(**G, algorithm="summa", trace="read-only"), OutputPathError),
    Case("empty-sweep-list", ["run", "empty-sweep.yaml", "--out", "out"],
         "empty-sweep.yaml: sweep: sweep list 'm' is empty",
         lambda: api.run_experiment("empty-sweep.yaml", "out"), ConfigError),
    Case("sweep-above-cap", ["run", "big-sweep.yaml", "--out", "out"],
         "big-sweep.yaml: the sweep has 3 points, above its max_points of 2; rerun with --yes",
         lambda: api.run_experiment("big-sweep.yaml", "out"), UserError),
    # ---- counts and sizes
    Case("chips-zero", [*STEP, "--mesh", "16x16", "--chips", "0"], "--chips '0' must be an integer >= 1",
         lambda: api.step(**S, mesh="16x16", chips=0), UserError, "chips 0 must be an integer >= 1"),
    Case("batch-negative", [*STEP, "--mesh", "16x16", "--chips", "256", "--batch", "-1"],
         "--batch '-1' must be an integer >= 1",
         lambda: api.step(**S, mesh="16x16", chips=256, batch=-1), UserError, "batch -1 must be an integer >= 1"),
    Case("batch-zero", [*STEP, "--mesh", "16x16", "--chips", "256", "--batch", "0"],
         "--batch '0' must be an integer >= 1",
         lambda: api.step(**S, mesh="16x16", chips=256, batch=0), UserError, "batch 0 must be an integer >= 1"),
    Case("slices-fraction", [*GEMM, "--algorithm", "meshslice", "--slices", "2.5"],
         "--slices '2.5' must be an integer >= 1",
         lambda: api.gemm(**G, algorithm="meshslice", slices=2.5), UserError, "slices 2.5 must be an integer >= 1"),
    Case("step-slices-fraction", [*STEP, "--mesh", "16x16", "--chips", "256", "--slices", "2.5"],
         "slices '2.5' must be an integer >= 1",
         lambda: api.step(**S, mesh="16x16", chips=256, slices=2.5), UserError, "slices 2.5 must be an integer"),
    Case("bytes-zero", [*COLLECTIVE, "--axis", "0", "--bytes", "0"], "--bytes: size '0' must be a finite number > 0",
         lambda: api.collective(**{**C, "bytes": 0}, axis=0), UserError, "size 0 must be a finite number > 0"),
    Case("m-zero", [*GEMM, "--algorithm", "summa", "--m", "0"], "--m '0' must be an integer >= 1",
         lambda: api.gemm(**{**G, "m": 0}, algorithm="summa"), UserError, "m 0 must be an integer >= 1"),
    Case("n-negative", [*GEMM, "--algorithm", "summa", "--n", "-64"], "--n '-64' must be an integer >= 1",
         lambda: api.gemm(**{**G, "n": -64}, algorithm="summa"), UserError, "n -64 must be an integer >= 1"),
    Case("chunks-zero", [*COLLECTIVE, "--axis", "0", "--chunks", "0"], "--chunks '0' must be an integer >= 1",
         lambda: api.collective(**C, axis=0, chunks=0), UserError, "chunks 0 must be an integer >= 1"),
    Case("tune-chips-fraction", ["tune", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "2.5"],
         "--chips '2.5' must be an integer >= 1",
         lambda: api.tune(model="gpt3-175b", hardware="meshslice-sim", chips=2.5), UserError,  # type: ignore[arg-type]
         "chips 2.5 must be an integer >= 1"),
    Case("bytes-per-param-negative", [*STEP, "--mesh", "16x16", "--chips", "256", "--bytes-per-param", "-1"],
         "--bytes-per-param '-1' must be a finite number > 0",
         lambda: api.step(**S, mesh="16x16", chips=256, bytes_per_param=-1), UserError,
         "bytes_per_param -1 must be a finite number > 0"),
    Case("timeout-negative", ["run", "ok.yaml", "--out", "out", "--timeout", "-1"],
         "--timeout '-1' must be a finite number > 0",
         lambda: api.run_experiment("ok.yaml", "out", timeout=-1), UserError, "--timeout -1 must be a finite"),
    # ---- topology, mesh and axes
    Case("illegal-tpuv4-slice", [*COLLECTIVE, "--axis", "0", "--topology", "3x5x8", "--mesh", "8x15"],
         "illegal TPUv4 slice '3x5x8': every side must be <= 4, or every side a multiple of 4",
         lambda: api.collective(**{**C, "topology": "3x5x8", "mesh": "8x15"}, axis=0), TopologyError),
    Case("mesh-not-chip-count", [*STEP, "--chips", "256", "--mesh", "16x8"],
         "mesh 16x8 has 128 chips but chips is 256; valid: a mesh R x C with R * C = 256",
         lambda: api.step(**S, chips=256, mesh="16x8"), UserError),
    Case("mesh-pair-fraction", None, "",
         lambda: api.gemm(**{**G, "mesh": (2.5, 2)}, algorithm="summa"), TopologyError,  # type: ignore[arg-type]
         "mesh (2.5, 2) is not a mesh shape"),
    Case("axis-out-of-range", [*COLLECTIVE, "--axis", "2"], "--axis '2' is out of range; valid: 0, 1",
         lambda: api.collective(**C, axis=2), UserError, "axis 2 is out of range; valid: 0, 1"),
    Case("axis-map-unknown-axis", [*COLLECTIVE, "--axis", "0", "--axis-map", "x,q"],
         "--axis-map 'x,q' names unknown axis 'q'; topology 'tpuv4:4x4x4' has axes x, y, z",
         lambda: api.collective(**C, axis=0, axis_map="x,q"), TopologyError),
    Case("axis-map-one-part", [*COLLECTIVE, "--axis", "0", "--axis-map", "x*y"],
         "--axis-map 'x*y' must have exactly two parts",
         lambda: api.collective(**C, axis=0, axis_map="x*y"), TopologyError),
    # ---- feasibility
    Case("heads-indivisible", [*STEP, "--model", "gpt3-175b", "--mesh", "4x64", "--chips", "256"],
         "infeasible configuration on mesh 4x64: 64 does not divide the 96 heads of gpt3-175b",
         lambda: api.step(**S, mesh="4x64", chips=256), InfeasibleError, suggestion=HEADS_HINT),
    Case("batch-indivisible", [*STEP, "--mesh", "16x16", "--chips", "256", "--batch", "100"],
         "infeasible configuration on mesh 16x16: 16 does not divide the batch of 100 sequences",
         lambda: api.step(**S, mesh="16x16", chips=256, batch=100), InfeasibleError, suggestion=HEADS_HINT),
    Case("meshslice-k-indivisible", [*GEMM, "--algorithm", "meshslice", "--slices", "7"],
         "--slices 7: the sliced dimension k = 64 is not divisible by lcm(2, 2) x 8 x 7; feasible slice counts: "
         "1, 2, 4", lambda: api.gemm(**G, algorithm="meshslice", slices=7), InfeasibleError),
    Case("cannon-non-square", [*GEMM, "--algorithm", "cannon", "--mesh", "2x4"],
         "algorithm 'cannon' needs a square mesh; got 2x4",
         lambda: api.gemm(**{**G, "mesh": "2x4"}, algorithm="cannon"), InfeasibleError),
    Case("slices-without-slicing", [*GEMM, "--algorithm", "cannon", "--slices", "2"],
         "--slices 2 does not apply to algorithm 'cannon'; only 'meshslice' (its slice count S) and 'summa' (its "
         "panel count S) take one", lambda: api.gemm(**G, algorithm="cannon", slices=2), InfeasibleError),
    Case("step-dataflows-count", [*STEP, "--mesh", "16x16", "--chips", "256", "--dataflows", "os,ls"],
         "dataflows 'os,ls' needs 1 or 4 values (qkv, out_proj, ff1, ff2)",
         lambda: api.step(**S, mesh="16x16", chips=256, dataflows="os,ls"), UserError),
    Case("step-transposes-value", [*STEP, "--mesh", "16x16", "--chips", "256", "--transposes", "2"],
         "--transposes '2' must be 0 or 1",
         lambda: api.step(**S, mesh="16x16", chips=256, transposes=["2"]), UserError,
         "transposes: value '2' must be 0 or 1"),
    # ---- names
    Case("unknown-algorithm", [*GEMM, "--algorithm", "meshslyce"],
         "unknown algorithm 'meshslyce'; valid: cannon, collective, fsdp, meshslice, summa, tp1d, wang",
         lambda: api.gemm(**G, algorithm="meshslyce"), UnknownNameError, suggestion="did you mean 'meshslice'?"),
    Case("unknown-model", [*STEP, "--model", "gpt3-157b", "--mesh", "16x16", "--chips", "256"],
         "unknown model 'gpt3-157b'; valid: gpt3-175b, llama2-70b, llama2-7b, llama3.1-405b, llama3.1-70b, "
         "llama3.1-8b, megatron-nlg-530b, megatron-nlg-530b-ms, mistral-7b, palm-540b",
         lambda: api.step(**{**S, "model": "gpt3-157b"}, mesh="16x16"), UnknownNameError,
         suggestion="did you mean 'gpt3-175b'?"),
    Case("unknown-hardware", [*COLLECTIVE, "--axis", "0", "--hardware", "tpu-v4"],
         "unknown hardware profile 'tpu-v4'; valid: meshslice-sim, meshslice-tpu-fit, tpuv4",
         lambda: api.collective(**{**C, "hardware": "tpu-v4"}, axis=0), UnknownNameError,
         suggestion="did you mean 'tpuv4'?"),
    Case("unknown-dtype", [*GEMM, "--algorithm", "summa", "--dtype", "fp8"],
         "dtype: unknown dtype 'fp8'; valid: int8, bf16, fp16, fp32, fp64",
         lambda: api.gemm(**G, algorithm="summa", dtype="fp8"), UserError),
    Case("unknown-ring", [*COLLECTIVE, "--axis", "0", "--ring", "tri"],
         "unknown ring variant 'tri'; valid: bi, uni",
         lambda: api.collective(**C, axis=0, ring="tri"), UnknownNameError,
         "unknown ring variant 'tri'; valid: bi, uni"),
    Case("unknown-multi-axis", [*COLLECTIVE, "--axis", "0", "--multi-axis", "diagonal"],
         "unknown multi-axis schedule 'diagonal'; valid: dimensional, snake",
         lambda: api.collective(**C, axis=0, multi_axis="diagonal"), UnknownNameError,
         suggestion="did you mean 'dimensional'?"),
    # ---- collective switches and software costs
    Case("overlap-limit-zero", [*COLLECTIVE, "--axis", "0", "--overlap-limit", "0"],
         "--overlap-limit '0' must be an integer >= 1 or 'unlimited'",
         lambda: api.collective(**C, axis=0, overlap_limit=0), UserError,
         "overlap_limit 0 must be an integer >= 1 or 'unlimited'"),
    Case("overlap-limit-word", [*COLLECTIVE, "--axis", "0", "--overlap-limit", "many"],
         "--overlap-limit 'many' must be an integer >= 1 or 'unlimited'",
         lambda: api.collective(**C, axis=0, overlap_limit="many"), UserError,
         "overlap_limit 'many' must be an integer >= 1 or 'unlimited'"),
    Case("multi-axis-on-calibrated", [*CALIBRATED, "--multi-axis", "snake"],
         "multi-axis 'snake' applies to physical profiles; 'meshslice-sim' is calibrated (its abstract rings have "
         "no physical axes)", lambda: api.collective(**CC, multi_axis="snake"), ConfigError),
    Case("scale-step-on-calibrated", [*CALIBRATED, "--scale-step", "2"],
         "scale factor step=2 applies to physical profiles; 'meshslice-sim' has no per-transfer handshake (its "
         "per-step latency is lambda)", lambda: api.collective(**CC, scale={"step": 2}), ConfigError),
    Case("scale-step-negative", [*COLLECTIVE, "--axis", "0", "--scale-step", "-1"],
         "--scale-step '-1' must be a finite number >= 0",
         lambda: api.collective(**C, axis=0, scale={"step": -1}), UserError, "step -1 must be a finite number >= 0"),
    Case("step-overhead-negative", [*COLLECTIVE, "--axis", "0", "--hardware", "step.yaml"],
         "step.yaml: ici.step_overhead: time '-4 us' must be a finite number >= 0",
         lambda: load_hardware("step.yaml"), ConfigError),
    Case("op-overhead-negative", [*COLLECTIVE, "--axis", "0", "--hardware", "op.yaml"],
         "op.yaml: chip.op_overhead: time '-1 us' must be a finite number >= 0",
         lambda: load_hardware("op.yaml"), ConfigError),
    Case("launch-overhead-nan", [*COLLECTIVE, "--axis", "0", "--hardware", "nan.yaml"],
         "nan.yaml: ici.launch_overhead.all_gather: time nan must be a finite number >= 0",
         lambda: load_hardware("nan.yaml"), ConfigError),
    Case("overlap-limits-zero", [*COLLECTIVE, "--axis", "0", "--hardware", "limits.yaml"],
         "limits.yaml: overlap_limits.all_gather: 0 is invalid: input should be greater than or equal to 1",
         lambda: load_hardware("limits.yaml"), ConfigError),
    Case("unknown-scale-key", None, "",
         lambda: api.gemm(**G, algorithm="summa", scale={"bta": 2.0}), UnknownNameError,
         "unknown scale key 'bta'; valid: alpha, beta, dcn, dma, flops, hbm, lambda, op, step, vector",
         suggestion="did you mean 'beta'?"),
]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory holding every file the cases name, with one unreadable file and one read-only folder."""
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "unit.yaml").write_text(_hardware_with("link_bandwidth: 45e9", 'link_bandwidth: "45 GB"'))
    (tmp_path / "type.yaml").write_text(_hardware_with("hop_latency: 1e-6", "hop_latency: [1]"))
    (tmp_path / "step.yaml").write_text(_hardware_with("step_overhead: 4 us", "step_overhead: -4 us"))
    (tmp_path / "op.yaml").write_text(_hardware_with("op_overhead: 1 us", "op_overhead: -1 us"))
    (tmp_path / "nan.yaml").write_text(_hardware_with("all_gather: 13 us", "all_gather: .nan"))
    (tmp_path / "limits.yaml").write_text(_hardware_with("\n  all_gather: 1 ", "\n  all_gather: 0 "))
    (tmp_path / "locked.yaml").chmod(0)
    (tmp_path / "read-only").mkdir()
    (tmp_path / "read-only").chmod(0o555)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    (tmp_path / "read-only").chmod(0o755)
    (tmp_path / "locked.yaml").chmod(0o644)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    del workdir
    if case.unless is not None and (reason := case.unless()):
        pytest.skip(reason)
    if case.argv is not None:
        assert main(case.argv) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert "Traceback" not in err
        lines = err.splitlines()
        assert len(lines) == (2 if case.suggestion else 1), lines
        assert case.needle in lines[0]
        if case.suggestion:
            assert lines[1] == case.suggestion
    if case.api is not None:
        assert case.error is not None
        with pytest.raises(TpusimError) as info:
            case.api()
        assert type(info.value) is case.error, info.value
        assert (case.api_needle or case.needle) in info.value.message
        assert "\n" not in info.value.message
        if case.suggestion:
            assert info.value.suggestion == case.suggestion


def test_every_case_is_checked_somewhere() -> None:
    assert all(c.argv is not None or c.api is not None for c in CASES)
    assert all(c.needle or c.argv is None for c in CASES)
    assert len({c.id for c in CASES}) == len(CASES)
