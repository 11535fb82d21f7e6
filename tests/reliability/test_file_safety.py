"""Files tpusim writes and reads back (docs/limits.md#files): never through a device node, FIFO, directory or link;
regular files within a size limit only; write failures one line and exit 2; no file's text in any message.

Every case runs the command line as a real process in a temporary folder of its own, on nodes, FIFOs and links the
test creates there (never a system path).
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reliability.files import TINY_GEMM_POINT
from tpusim.engine.context import Context
from tpusim.errors import ECHO_MAX, LINE_MAX, UserError, echo
from tpusim.experiments.run import run_experiment

GEMM = ["gemm", "--hardware", "tpuv4", "--mesh", "2x2", "--algorithm", "collective", "--dataflow", "os",
        "--m", "256", "--n", "256", "--k", "256"]
TINY = "name: tiny\n" + TINY_GEMM_POINT + "sweep:\n  grid:\n    m: [64, 128]\n"
REFUSED = "tpusim writes only regular files and refuses to replace or write through anything else; give another path"


def _tpusim(args: list[str], cwd: Path, *, file_limit: int | None = None, stdout: int | None = subprocess.PIPE,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m tpusim ARGS`` in ``cwd``; ``file_limit`` bytes of RLIMIT_FSIZE (SIGXFSZ ignored, so a write past
    it fails with EFBIG)."""

    def limited() -> None:
        if file_limit is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), **(env or {})}
    return subprocess.run([sys.executable, "-m", "tpusim", *args], cwd=cwd, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=120, env=environment, preexec_fn=limited, check=False)


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command said (exit status 2, no traceback), without the notes before it."""
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def _experiment(folder: Path) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(TINY)
    return path


def _run_folder_beside_a_victim(folder: Path, text: str) -> tuple[Path, Path]:
    """The tiny experiment, an empty output folder ``o`` and, outside it, a file holding ``text`` that nothing may
    touch."""
    _experiment(folder)
    out = folder / "o"
    out.mkdir()
    victim = folder / "victim"
    victim.write_text(text)
    return out, victim


# ------------------------------------------------------------------------------------------- 1: write targets


@pytest.mark.parametrize("kind", ["device", "fifo", "symlink", "dangling-symlink"])
@pytest.mark.parametrize("flag", ["--trace", "--trace-best"])
@pytest.mark.slow
def test_a_trace_never_replaces_anything_but_a_regular_file(kind: str, flag: str, tmp_path: Path) -> None:
    target = tmp_path / "x"
    victim = tmp_path / "victim"
    victim.write_text("keep")
    if kind == "device":
        if os.geteuid() != 0:
            pytest.skip("creating a device node needs root")
        os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to(victim if kind == "symlink" else tmp_path / "missing")
    before = os.lstat(target)
    args = GEMM if flag == "--trace" else ["tune", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "16",
                                           "--ignore-memory"]
    line = _one_line(_tpusim([*args, flag, "x"], tmp_path))
    what = {"device": "a character device", "fifo": "a FIFO"}.get(kind, "a symbolic link")
    assert line == f"trace path 'x' is {what}; {REFUSED}"
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
    assert victim.read_text() == "keep"


def test_the_api_trace_refuses_a_fifo(tmp_path: Path) -> None:
    from tpusim import api

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError) as refused:
        api.gemm(hardware="tpuv4", mesh="2x2", algorithm="collective", dataflow="os", m=256, n=256, k=256,
                 trace=str(fifo))
    assert refused.value.message == f"trace path {str(fifo)!r} is a FIFO; {REFUSED}"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("name", ["results.csv", "results.json", "run_meta.json"])
@pytest.mark.slow
def test_a_run_refuses_a_results_file_that_is_a_link_before_any_point(name: str, tmp_path: Path) -> None:
    out, victim = _run_folder_beside_a_victim(tmp_path, "keep")
    (out / name).symlink_to(victim)
    line = _one_line(_tpusim(["run", "tiny.yaml", "--out", "o"], tmp_path))
    assert line == f"results file 'o/{name}' is a symbolic link; {REFUSED}"
    assert victim.read_text() == "keep"
    assert sorted(p.name for p in out.iterdir()) == [name]  # no point ran, nothing written


# ------------------------------------------------------------------------------------------------ 2: the lock


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
@pytest.mark.slow
def test_a_lock_that_is_not_the_folders_own_file_is_never_written(kind: str, tmp_path: Path) -> None:
    out, victim = _run_folder_beside_a_victim(tmp_path, "text\n")
    lock = out / ".lock"
    if kind == "symlink":
        lock.symlink_to(Path("..") / "victim")
    elif kind == "hardlink":
        os.link(victim, lock)
    else:
        os.mkfifo(lock)
    line = _one_line(_tpusim(["run", "tiny.yaml", "--out", "o"], tmp_path))
    remedy = "tpusim never writes through it (remove it: the run creates its lock anew)"
    expected = {"symlink": f"the lock file 'o/.lock' is a symbolic link; valid: a regular file; {remedy}",
                "hardlink": f"the lock file 'o/.lock' has other hard links; {remedy}",
                "fifo": f"the lock file 'o/.lock' is a FIFO; valid: a regular file; {remedy}"}[kind]
    assert line == expected
    assert victim.read_text() == "text\n"
    assert not (out / "results.json").exists()


# ------------------------------------------------------------------------------------------ 9: bounded reads


@pytest.mark.parametrize("kind", ["fifo", "zero-link", "directory"])
@pytest.mark.slow
def test_a_resumed_results_file_that_is_not_a_regular_file_is_one_line(kind: str, tmp_path: Path) -> None:
    _experiment(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    results = out / "results.json"
    zero = tmp_path / "zero"
    if kind == "fifo":
        os.mkfifo(results)
    elif kind == "directory":
        results.mkdir()
    else:  # stands for /dev/zero: a link to a node the test made (a FIFO: it would block any read)
        os.mkfifo(zero)
        results.symlink_to(zero)
    line = _one_line(_tpusim(["run", "tiny.yaml", "--out", "o", "--resume"], tmp_path))
    what = {"fifo": "a FIFO", "directory": "a directory", "zero-link": "a symbolic link"}[kind]
    assert line == f"results file 'o/results.json' is {what}; {REFUSED}"


@pytest.mark.slow
def test_a_run_meta_fifo_is_refused_on_a_fresh_run(tmp_path: Path) -> None:
    _experiment(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    os.mkfifo(out / "run_meta.json")
    line = _one_line(_tpusim(["run", "tiny.yaml", "--out", "o"], tmp_path))
    assert line == f"results file 'o/run_meta.json' is a FIFO; {REFUSED}"
    assert stat.S_ISFIFO(os.lstat(out / "run_meta.json").st_mode)


@pytest.mark.slow
def test_a_results_file_over_its_limit_is_refused_unread(tmp_path: Path) -> None:
    _experiment(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    (out / "results.json").write_text(" " * 101)
    done = _tpusim(["run", "tiny.yaml", "--out", "o", "--resume"], tmp_path,
                   env={"TPUSIM_LIMITS_RESULTS_BYTES": "100"})
    assert _one_line(done) == (
        "results file 'o/results.json' is larger than the limit: its size exceeds the limit of 100 bytes of a run's "
        "results.json or run_meta.json read back; valid: up to 100 (raise it with TPUSIM_LIMITS_RESULTS_BYTES=N, see "
        "docs/limits.md); it cannot be resumed or replaced (use another --out folder)")


def _cache_entry(tmp_path: Path) -> tuple[Path, str, dict[str, object]]:
    """A cache folder holding the one entry the GeMM writes, and that entry's name and the GeMM's result."""
    cache = tmp_path / "c"
    done = _tpusim(["--cache", "c", *GEMM, "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    (entry,) = cache.glob("*.json")  # beside the folder's key
    return cache, entry.name, json.loads(done.stdout)


@pytest.mark.parametrize("kind", ["fifo", "directory", "link"])
@pytest.mark.slow
def test_a_cache_entry_that_is_not_a_regular_file_is_ignored_and_recomputed(kind: str, tmp_path: Path) -> None:
    cache, name, expected = _cache_entry(tmp_path)
    entry = cache / name
    entry.unlink()
    fifo = tmp_path / "fifo"
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "directory":
        entry.mkdir()
    else:
        os.mkfifo(fifo)
        entry.symlink_to(fifo)
    done = _tpusim(["--cache", "c", *GEMM, "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["time_s"] == expected["time_s"]
    what = {"fifo": "a FIFO", "directory": "a directory", "link": "a symbolic link"}[kind]
    note = f"note: cache entry 'c/{name}' is {what}: ignored and not replaced (the result was computed)\n"
    assert note in done.stderr
    assert "Traceback" not in done.stderr
    assert stat.S_IFMT(os.lstat(entry).st_mode) == {"fifo": stat.S_IFIFO, "directory": stat.S_IFDIR,
                                                     "link": stat.S_IFLNK}[kind]


@pytest.mark.slow
def test_a_forged_cache_entry_with_its_plain_digest_recomputed_is_recomputed(tmp_path: Path) -> None:
    # issue 26, lower item: a doubled time with its plain hash recomputed was believed; only the folder's key
    # makes a digest that verifies
    from tpusim.engine.cache import cache_key

    cache, name, expected = _cache_entry(tmp_path)
    entry = json.loads((cache / name).read_text())
    entry["value"]["time_s"] *= 2
    entry["digest"] = cache_key(entry["value"])
    (cache / name).write_text(json.dumps(entry))
    done = _tpusim(["--cache", "c", *GEMM, "--json"], tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["time_s"] == expected["time_s"]
    assert json.loads((cache / name).read_text())["value"]["time_s"] == expected["time_s"]  # replaced, sound


# -------------------------------------------------------------------------------------- 13: write failures


@pytest.mark.slow
def test_a_cache_write_over_the_file_size_limit_is_one_line_after_the_result(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    done = _tpusim(["--cache", "c", *GEMM, "--json"], tmp_path, file_limit=100)
    line = _one_line(done)
    assert line.startswith("cannot write the cache entry 'c/") and line.endswith(
        ".json': File too large; the result was not cached (it is computed again next time)")
    assert json.loads(done.stdout)["time_s"] > 0  # the result was printed all the same
    assert [path.name for path in (tmp_path / "c").iterdir()] == [".key"]  # no entry, no temporary file


@pytest.mark.slow
def test_a_trace_write_over_the_file_size_limit_is_one_line(tmp_path: Path) -> None:
    done = _tpusim([*GEMM, "--trace", "t.json"], tmp_path, file_limit=1000)
    assert _one_line(done) == "cannot write the trace file 't.json': File too large; an earlier file there is unchanged"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_full_stdout_is_one_line(tmp_path: Path) -> None:
    with open(tmp_path / "out.json", "w") as sink:
        done = _tpusim([*GEMM, "--json"], tmp_path, file_limit=10, stdout=sink.fileno())
    assert _one_line(done) == "cannot write the output to stdout: File too large"


def test_a_closed_stdout_is_refused_before_any_work(tmp_path: Path) -> None:
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "tpusim", *GEMM, "--trace", "t.json"], cwd=tmp_path,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120, env=environment,
                          preexec_fn=lambda: os.close(1), check=False)
    assert _one_line(done) == "standard output is closed; give it a file or /dev/null (e.g. '> out.txt')"
    assert not (tmp_path / "t.json").exists()


@pytest.mark.slow
def test_a_failed_cache_write_inside_a_run_keeps_every_points_result(tmp_path: Path) -> None:
    _experiment(tmp_path)
    first = _tpusim(["--cache", "c", "run", "tiny.yaml", "--out", "o1", "--json"], tmp_path)
    assert first.returncode == 0, first.stderr
    for entry in (tmp_path / "c").iterdir():  # every entry becomes a name the cache cannot replace
        entry.unlink()
        entry.mkdir()
    done = _tpusim(["--cache", "c", "run", "tiny.yaml", "--out", "o2", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["points_finished"] == 2 and summary["points_with_errors"] == 0
    expected = json.loads(first.stdout)["rows"]
    assert [row["time_s"] for row in summary["rows"]] == [row["time_s"] for row in expected]
    assert any(note.startswith("the disk cache was not written for 2 point(s)") for note in summary["notes"])


# ------------------------------------------------------------------------------------ 16: no file text, bounded


@pytest.mark.parametrize("text", [
    "root:$6$SECRETHASHVALUE:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUSECRETHASHVALUE\n"
    "-----END OPENSSH PRIVATE KEY-----\n",
    "token: [SECRETHASHVALUE\n",
    "a: !SECRETHASHVALUE x\n",
], ids=["shadow", "private-key", "syntax", "tag"])
@pytest.mark.parametrize("command", ["run", "model", "hardware"])
@pytest.mark.slow
def test_a_file_of_another_kind_is_never_quoted(text: str, command: str, tmp_path: Path) -> None:
    (tmp_path / "secret.yaml").write_text(text)
    args = {"run": ["run", "secret.yaml", "--out", "o"],
            "model": ["step", "--model", "./secret.yaml", "--hardware", "tpuv4", "--mesh", "2x2"],
            "hardware": [*GEMM[:1], "--hardware", "./secret.yaml", *GEMM[3:]]}[command]
    line = _one_line(_tpusim(args, tmp_path))
    assert line.startswith("secret.yaml")
    assert "SECRET" not in line and "root" not in line and "OPENSSH" not in line


@pytest.mark.slow
def test_an_echoed_value_is_cut_to_a_bounded_length(tmp_path: Path) -> None:
    name = "a" * 100_000
    line = _one_line(_tpusim([GEMM[0], "--hardware", name, *GEMM[3:]], tmp_path))
    assert line.startswith(f"unknown hardware profile '{'a' * (ECHO_MAX - 4)}... (100002 characters); valid: ")
    assert len(line) < ECHO_MAX + 200


LONG = "a" * 100_000
LONG_DIGITS = "9" * 100_000
ECHOED = {
    "mesh": [*GEMM[:3], LONG, *GEMM[5:]],
    "algorithm": [*GEMM[:5], LONG, *GEMM[7:]],
    "dataflow": [*GEMM[:7], LONG, *GEMM[9:]],
    "m-word": [*GEMM[:9], LONG, *GEMM[11:]],
    "m-digits": [*GEMM[:9], LONG_DIGITS, *GEMM[11:]],
    "slow-chip": [*GEMM, "--slow-chip", LONG],
    "slow-link": [*GEMM, "--slow-link", LONG],
    "scale": [*GEMM, "--scale-beta", LONG],
    "trace-chips": [*GEMM, "--trace", "t.json", "--trace-chips", LONG],
    "bytes": ["collective", "--hardware", "tpuv4", "--topology", "torus:4x4", "--mesh", "4x4", "--axis", "0",
              "--op", "all-gather", "--bytes", LONG],
    "topology": ["collective", "--hardware", "tpuv4", "--topology", LONG, "--mesh", "4x4", "--axis", "0",
                 "--op", "all-gather", "--bytes", "1MB"],
    "model": ["step", "--model", LONG, "--hardware", "tpuv4", "--mesh", "2x2"],
    "layout": ["step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--layout", LONG],
    "experiment": ["run", LONG, "--out", "o"],
    "out": ["run", "tiny.yaml", "--out", LONG],
    "scheduler": ["run", "tiny.yaml", "--out", "o", "--executor", "dask", "--scheduler", LONG],
    "timeout": ["run", "tiny.yaml", "--out", "o", "--timeout", LONG],
    "cache": ["--cache", LONG, *GEMM],
}


@pytest.mark.parametrize("case", sorted(ECHOED))
def test_a_100000_character_value_anywhere_is_one_bounded_line(case: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from tpusim.cli.main import main

    monkeypatch.chdir(tmp_path)
    _experiment(tmp_path)
    status = main(ECHOED[case])
    out, err = capsys.readouterr()
    assert (status, out, "Traceback" in err) == (2, "", False), err[:300]
    assert len(err.splitlines()) == 1 and len(err) <= LINE_MAX + 1, err[:300]


@pytest.mark.slow
def test_a_cache_folder_name_too_long_is_one_line_with_the_name_cut(tmp_path: Path) -> None:
    name = "c" * 300  # beyond NAME_MAX: the path cannot even be looked at (it was an internal error, exit 1)
    line = _one_line(_tpusim(["--cache", name, *GEMM], tmp_path))
    assert line == f"cache folder {echo(name)} cannot be used: File name too long; give another folder"
    assert list(tmp_path.iterdir()) == []


def test_an_internal_error_is_one_bounded_line(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    cli = importlib.import_module("tpusim.cli.main")  # the module (tpusim.cli.main is also its function's name)

    def broken(*_: object) -> None:
        raise RuntimeError("x" * 100_000)  # a bug whose message quotes a huge value

    monkeypatch.setattr(Context, "with_cache", broken)
    assert cli.main(GEMM) == 1
    err = capsys.readouterr().err
    assert err.startswith("internal error: RuntimeError: xxx") and err.endswith(
        " (rerun with --debug for a traceback)\n")
    assert len(err.splitlines()) == 1 and len(err) == LINE_MAX + 1


def test_echo_and_the_line_bound() -> None:
    assert echo("mesh") == "'mesh'"
    assert echo("x" * 1000) == "'" + "x" * (ECHO_MAX - 4) + "... (1002 characters)"
    cut = f" ... [{9 * LINE_MAX} characters cut] ... "
    keep = (LINE_MAX - len(cut)) // 2
    assert UserError("y" * 10 * LINE_MAX).message == "y" * keep + cut + "y" * keep
    assert UserError("z" * LINE_MAX).message == "z" * LINE_MAX


# ---------------------------------------------------------------------------------------------- lower items


def test_empty_api_out_and_cache_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _experiment(tmp_path)
    with pytest.raises(UserError, match=r"^out '' is empty; give the folder's path \(it is created if missing\)$"):
        run_experiment("tiny.yaml", "")
    with pytest.raises(UserError, match=r"^cache '' is empty; give the folder's path \(it is created if missing\)$"):
        run_experiment("tiny.yaml", "o", cache="")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


@pytest.mark.slow
def test_a_malformed_fault_variable_is_one_line(tmp_path: Path) -> None:
    _experiment(tmp_path)
    done = _tpusim(["run", "tiny.yaml", "--out", "o"], tmp_path, env={"TPUSIM_FAULT_KILL_AFTER": "abc"})
    assert _one_line(done) == ("TPUSIM_FAULT_KILL_AFTER 'abc' must be a whole number >= 0 (the points after which "
                               "the run kills itself; 0 or unset: never)")
    assert not (tmp_path / "o").exists()
