"""``tpusim summarize``: the documented GPT-3 example prints what docs/results.md shows; on real traces the
figures add up (exposed + hidden = communication, the shares = the exposed time, the critical path = the end
time) and agree with the run's own breakdown; ``step --json`` carries the same summary; bad input is one line,
exit status 2."""

from __future__ import annotations

import itertools
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tpusim.cli.main import main

ROOT = Path(__file__).resolve().parents[1].parent
NS = 1e-9
GPT3_STEP = ["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--mesh", "4x4", "--ignore-memory",
             "--trace-chips", "0"]


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _example() -> list[tuple[list[str], list[str]]]:
    """The commands of the console block of docs/results.md#trace-summaries, each with the lines shown after it."""
    text = (ROOT / "docs" / "results.md").read_text()
    section = text[text.index("## Trace summaries"):]
    block = section[section.index("```console\n") + len("```console\n"):]
    block = block[:block.index("```")]
    commands: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((shlex.split(line[2:]), []))
        else:
            commands[-1][1].append(line)
    return commands


def test_the_documented_example_prints_what_the_docs_show(capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (step, notes), (summarize, shown) = _example()
    assert step[:1] == ["tpusim"] and step[-2:] == [">", "/dev/null"]  # the step's text is not shown, its notes are
    assert step[1:-2] == [*GPT3_STEP[:-2], "--trace", "gpt3.json", *GPT3_STEP[-2:]]
    code, _, err = _run(capsys, step[1:-2])
    assert (code, err.splitlines()) == (0, notes)
    code, out, _ = _run(capsys, summarize[1:])
    assert (code, out.splitlines()) == (0, shown)


def _adds_up(summary: dict[str, Any]) -> None:
    """The identities every summary keeps."""
    rows = [*summary["collectives"], *summary["layers"], *summary["ops"]]
    for row in (summary, *rows):
        assert row["hidden_s"] + row["exposed_s"] == pytest.approx(row["comm_s"], abs=1e-9)
    assert all(row["exposed_share_s"] <= row["exposed_s"] + 1e-12 for row in rows)
    for table in ("collectives", "layers", "ops"):
        assert sum(r["exposed_share_s"] for r in summary[table]) == pytest.approx(summary["exposed_comm_s"], abs=1e-9)
        assert sum(r["comm_s"] for r in summary[table]) == pytest.approx(summary["comm_s"], abs=1e-9)
    for table in ("layers", "ops"):
        assert sum(r["compute_s"] for r in summary[table]) == pytest.approx(summary["compute_s"], abs=1e-9)
    assert summary["compute_s"] + summary["exposed_comm_s"] + summary["idle_s"] == pytest.approx(summary["end_s"],
                                                                                                  abs=1e-9)
    path = summary["critical_path"]
    assert path["total_s"] == pytest.approx(summary["end_s"], abs=1e-9)
    assert sum(path["by_kind"].values()) == pytest.approx(path["total_s"], abs=1e-9)
    runs = path["runs"]
    assert runs[0]["start_s"] == 0.0 and runs[-1]["end_s"] == summary["end_s"]
    assert all(a["end_s"] == b["start_s"] for a, b in itertools.pairwise(runs))


@pytest.fixture(scope="module")
def gpt3(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """``step --json`` of the documented GPT-3 step and the trace it wrote."""
    import contextlib
    import io

    trace = tmp_path_factory.mktemp("summarize") / "gpt3.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main([*GPT3_STEP, "--trace", str(trace), "--json"]) == 0
    return json.loads(out.getvalue()), trace


def test_a_gpt3_step_summary_adds_up(gpt3: tuple[dict[str, Any], Path]) -> None:
    step, _ = gpt3
    summary = step["summary"]
    _adds_up(summary)
    assert (summary["chip"], summary["chip_rule"]) == (0, "the critical chip")
    assert [r["layer"] for r in summary["layers"]] == ["L0", "L1", "L2"]  # the traced window of 96 layers
    assert [r["op"] for r in summary["collectives"]] == ["all-gather", "reduce-scatter", "all-reduce"]
    assert summary["critical_path"]["by_kind"].keys() == {"MXU", "vector unit", "all-gather", "reduce-scatter",
                                                          "all-reduce"}
    # the documented reading: out_proj is over half of the exposed time, the all-reduces a tenth
    out_proj = sum(r["exposed_share_s"] for r in summary["ops"] if r["op"].endswith(" out_proj"))
    assert 0.5 < out_proj / summary["exposed_comm_s"] < 0.55
    assert summary["collectives"][2]["exposed_share_s"] / summary["exposed_comm_s"] == pytest.approx(0.101, abs=1e-3)


def test_step_json_carries_what_summarize_prints(capsys: pytest.CaptureFixture[str],
                                                 gpt3: tuple[dict[str, Any], Path]) -> None:
    step, trace = gpt3
    code, out, err = _run(capsys, ["summarize", str(trace), "--json"])
    assert (code, err) == (0, "")
    assert json.loads(out) == step["summary"]


def test_without_a_trace_a_step_has_no_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, [*GPT3_STEP[:-2], "--json"])
    assert code == 0 and "summary" not in json.loads(out)


def _tiny_step(capsys: pytest.CaptureFixture[str], folder: Path, *extra: str) -> tuple[dict[str, Any], Path]:
    """``step --json`` of a 3-layer model traced over every layer on a tpuv4 4x4 torus, and its trace."""
    model = folder / "tiny3.yaml"
    model.write_text("name: tiny3\ndescription: a small transformer\nlayers: 3\nhidden: 512\nheads: 8\n"
                     "head_dim: 64\nffn: 2048\nsequence: 128\nvocabulary: 1000\n")
    trace = folder / "t.json"
    code, out, _ = _run(capsys, ["step", "--model", str(model), "--hardware", "tpuv4", "--topology", "torus:4x4",
                                 "--mesh", "4x4", "--algorithm", "meshslice", "--slices", "2", "--all-layers",
                                 "--trace", str(trace), "--json", *extra])
    assert code == 0
    return json.loads(out), trace


def test_a_physical_step_traced_over_every_layer_matches_its_breakdown(capsys: pytest.CaptureFixture[str],
                                                                       tmp_path: Path) -> None:
    step, trace = _tiny_step(capsys, tmp_path)
    summary = step["summary"]
    _adds_up(summary)
    spans = sum(1 for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X" and e["pid"] == 0)
    for field in ("compute_s", "exposed_comm_s", "idle_s"):  # each span's two ends are rounded to the nanosecond
        assert summary[field] == pytest.approx(step[field], abs=spans * NS)
    assert step["hbm_stall_s"] > 0  # tpuv4 charges collective DMA to HBM
    assert summary["hbm_stall_s"] == pytest.approx(step["hbm_stall_s"], rel=1e-12)
    assert summary["end_s"] == pytest.approx(step["step_time_s"], abs=NS)
    other = summarize_chip(capsys, trace, 3)
    assert other["chip"] == 3 and other["chip_rule"] == "asked for"
    _adds_up(other)


def test_a_chip_waiting_for_a_slow_mate_waits_on_the_collective(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    # chip 1 computes at half speed: chip 0 joins each collective first and waits for it, which a result counts as
    # exposed communication, so the summary does too (the trace's spans say how long it waited)
    step, trace = _tiny_step(capsys, tmp_path, "--slow-chip", "1:2", "--trace-chips", "0-1")
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e["ph"] == "X" and e["pid"] == 0 and e["args"].get("waited_s", 0) > 0 for e in events)
    summary = summarize_chip(capsys, trace, 0)
    _adds_up(summary)
    assert summary["idle_s"] == 0.0  # without the waits, tens of microseconds of idle
    assert step["summary"]["chip"] == 1  # the slow chip is the critical one


def summarize_chip(capsys: pytest.CaptureFixture[str], trace: Path, chip: int) -> dict[str, Any]:
    code, out, _ = _run(capsys, ["summarize", str(trace), "--chip", str(chip), "--json"])
    assert code == 0
    summary: dict[str, Any] = json.loads(out)
    return summary


def test_a_gemm_trace_agrees_with_the_gemm_result(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace = tmp_path / "g.json"
    code, out, _ = _run(capsys, ["gemm", "--hardware", "meshslice-sim", "--mesh", "4x4", "--dataflow", "os", "--m",
                                 "8192", "--n", "8192", "--k", "8192", "--algorithm", "meshslice", "--slices", "4",
                                 "--trace", str(trace), "--json"])
    assert code == 0
    gemm = json.loads(out)
    code, out, _ = _run(capsys, ["summarize", str(trace), "--json"])
    assert code == 0
    summary = json.loads(out)
    assert (summary["chip"], summary["chip_rule"]) == (0, "the lowest traced chip")  # a symmetric run traces chip 0
    _adds_up(summary)
    for field in ("compute_s", "exposed_comm_s", "idle_s"):
        assert summary[field] == pytest.approx(gemm[field], abs=8 * NS)
    assert summary["trace"] == {} and [r["layer"] for r in summary["layers"]] == ["other"]
    # the slices' gathers (on both axes at once) run back to back; the path ends with the last slice's GeMM
    assert [r["op"] for r in summary["critical_path"]["runs"]] == ["all-gather", "K4/4 gemm"]
    code, out, _ = _run(capsys, ["summarize", str(trace)])
    assert code == 0 and "\nlayer " not in out  # a GeMM trace names no layers: no layer or op table


@pytest.mark.parametrize(("argv", "message"), [
    (["missing.json"], "cannot read trace file 'missing.json': No such file or directory"),
    (["."], "cannot read trace file '.': Is a directory; valid: a trace file written by tpusim's --trace or "
            "--trace-best"),
    (["bad.json"], "trace file 'bad.json' is not JSON (Expecting value: line 1 column 1 (char 0)); valid: a trace "
                   "file written by tpusim's --trace or --trace-best"),
    (["list.json"], "trace file 'list.json' is not a JSON object with a 'traceEvents' list; valid: a trace file "
                    "written by tpusim's --trace or --trace-best"),
    (["empty.json"], "trace file 'empty.json' has no compute or collective spans of any chip; valid: a trace file "
                     "written by tpusim's --trace or --trace-best"),
    (["g.json", "--chip", "16"], "--chip 16: trace file 'g.json' has no chip 16; valid: 0-15 (the traced chips)"),
    (["g.json", "--chip", "x"], "--chip 'x' must be a chip id, a whole number >= 0"),
])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path, argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("not json")
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    (tmp_path / "g.json").write_text(json.dumps({"traceEvents": [
        *({"ph": "M", "name": "thread_name", "pid": chip, "tid": 1, "args": {"name": "MXU"}} for chip in range(16)),
        *({"ph": "X", "pid": chip, "tid": 1, "name": "K1/1 gemm", "ts": 0, "dur": 1, "args": {}}
          for chip in range(16))]}))
    code, out, err = _run(capsys, ["summarize", *argv])
    assert (code, out, err) == (2, "", message + "\n")


def test_a_trace_over_the_size_limit_is_refused_before_it_is_read(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("TPUSIM_LIMITS_TRACE_BYTES", "10")
    (tmp_path / "t.json").write_text('{"traceEvents": []}')
    code, _, err = _run(capsys, ["summarize", str(tmp_path / "t.json")])
    assert code == 2 and len(err.splitlines()) == 1 and "is larger than the limit" in err
