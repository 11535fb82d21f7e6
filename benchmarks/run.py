"""Wall-clock benchmarks of the simulator (a script, not a test).

    python benchmarks/run.py                 # every figure, median of 3, a table on stdout
    python benchmarks/run.py --json          # exactly one JSON object on stdout; progress on stderr
    python benchmarks/run.py --repeat 5 --only collective_transfers_per_s
    python benchmarks/run.py --only allgather_ring_2048_full_s,peak_rss_mb_gemm_2048_full   # several, in order

Each benchmark is a function in ``BENCHMARKS`` that builds its inputs (not timed), times the simulation
itself and returns a ``Measurement``. Add a figure by writing such a function and registering it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tpusim.api as tp
from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.factory import network_for, place_mesh
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.context import CACHE_ENV, Context
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import analytic_gemm
from tpusim.hardware import load_hardware
from tpusim.model.registry import load_model
from tpusim.topology import MeshMapping, map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp, Dataflow, Prefetch

GROUP_BYTES = 64_000_000  # 64 MB per gathered tensor


@dataclass
class Measurement:
    """One run of one benchmark: the figure, its unit, and facts to check the run did what it claims."""

    value: float
    unit: str
    info: dict[str, Any] = field(default_factory=dict)


Program = Callable[[Device], Any]


WIRE = "tpuv4-wire"  # TPUv4 links without software costs: the model wire-only simulators use


def _simulate(mapping: MeshMapping, program: Program) -> tuple[float, dict[str, Any]]:
    """Run ``program`` on every chip of ``mapping`` on ``tpuv4-wire`` at full fidelity; (wall seconds, facts)."""
    hardware = load_hardware(WIRE)
    begin = time.perf_counter()
    sim = Simulation(network_for(hardware, mapping))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping))
    run_spmd(sim, runtime, program, lambda dev: ())
    wall = time.perf_counter() - begin
    totals = runtime.network.totals(sim, sim.now)
    assert totals is not None
    return wall, {"simulated_s": sim.now, "transfers": totals.transfers, "events": sim.events}


ROUNDS = 10  # repeat the scenario inside one simulation so start-up does not dominate a 40 ms figure


def collective_transfers_per_s() -> Measurement:
    """torus:16x16, mesh 16x16: every chip gathers 4 MB on axis 0 and on axis 1 at once (64 MB per group),
    ten rounds in one simulation."""
    mapping = map_mesh(parse_topology("torus:16x16"), 16, 16)
    shard = Tensor((GROUP_BYTES // 16,), "int8")

    def program(dev: Device):  # type: ignore[no-untyped-def]
        for _ in range(ROUNDS):
            yield dev.wait(dev.all_gather(shard, axis=0), dev.all_gather(shard, axis=1))

    wall, info = _simulate(mapping, program)
    return Measurement(info["transfers"] / wall, "transfers/s", {**info, "wall_s": wall})


def allgather_torus_64x32_full_s() -> Measurement:
    """torus:64x32, mesh 64x32: 64 MB gathered over all 2048 chips, axis 1 then axis 0 (dimension-ordered)."""
    mapping = map_mesh(parse_topology("torus:64x32"), 64, 32)
    shard = Tensor((GROUP_BYTES // 2048,), "int8")

    def program(dev: Device):  # type: ignore[no-untyped-def]
        row = yield dev.all_gather(shard, axis=1)
        yield dev.all_gather(row, axis=0)

    wall, info = _simulate(mapping, program)
    closed = _closed_form(mapping, [(1, GROUP_BYTES // 2048), (0, GROUP_BYTES // 64)])
    return Measurement(wall, "s", {**info, "closed_form_s": closed})


def _closed_form(mapping: MeshMapping, gathers: list[tuple[int, int]]) -> float:
    """The summed twins of all-gathers run one after another, each (axis, bytes of each caller's shard)."""
    network = network_for(load_hardware(WIRE), mapping)
    total = 0.0
    for axis, nbytes in gathers:
        twin = network.twin(CollectiveCall(CollectiveOp.ALL_GATHER, axis, nbytes))
        assert twin is not None
        total += twin
    return total


def allgather_ring_2048_full_s() -> Measurement:
    """torus:2048, mesh 1x2048: one 64 MB all-gather over a 2048-chip wrapped ring."""
    mapping = map_mesh(parse_topology("torus:2048"), 1, 2048)
    shard = Tensor((GROUP_BYTES // 2048,), "int8")

    def program(dev: Device):  # type: ignore[no-untyped-def]
        yield dev.all_gather(shard, axis=1)

    wall, info = _simulate(mapping, program)
    return Measurement(wall, "s", {**info, "closed_form_s": _closed_form(mapping, [(1, GROUP_BYTES // 2048)])})


def _status_kb(key: str) -> int:
    """A ``kB`` line of this process's /proc/self/status (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(f"{key}:")))


def ring_bytes_per_transfer() -> Measurement:
    """Memory of ``allgather_ring_2048_full_s`` per link transfer, in a fresh process: its peak resident memory
    (``VmHWM``) over what it held with the ring mapped and every module imported, divided by the transfers."""
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import run; "
            "run.load_hardware(run.WIRE); run.map_mesh(run.parse_topology('torus:2048'), 1, 2048); "
            "before = run._status_kb('VmRSS'); figure = run.allgather_ring_2048_full_s(); "
            "print(before, run._status_kb('VmHWM'), figure.info['transfers'])")
    _, out = _subprocess([sys.executable, "-c", code])
    before, peak, transfers = (int(word) for word in out.split())
    return Measurement((peak - before) * 1024 / transfers, "B/transfer",
                       {"rss_before_mb": before / 1024, "peak_mb": peak / 1024, "transfers": transfers})


FF1 = {"m": 524288, "k": 12288, "n": 49152}  # GPT-3 FF1 at 256 sequences: M = 256 x 2048 tokens


_COLD_FOLDERS: list[tempfile.TemporaryDirectory] = []


def _cold() -> Context:
    """Each timed run starts from an empty timing cache: a fresh context with a fresh, empty disk folder."""
    folder = tempfile.TemporaryDirectory()
    _COLD_FOLDERS.append(folder)
    return Context.with_cache(folder.name)


def _timed_cold(call: Callable[..., Any], **fields: Any) -> tuple[float, Any]:
    """Wall seconds and result of ``call(**fields)`` (an API entry point) on a cold cache."""
    context = _cold()
    begin = time.perf_counter()
    result = call(**fields, context=context)
    return time.perf_counter() - begin, result


def gemm_full_s() -> Measurement:
    """MeshSlice OS, GPT-3 FF1, 16x16 on meshslice-tpu-fit, K = 8, full fidelity."""
    wall, result = _timed_cold(tp.gemm, hardware="meshslice-tpu-fit", mesh="16x16", algorithm="meshslice",
                               dataflow="os", slices=8, fidelity="full", **FF1)
    return Measurement(wall, "s", {"simulated_s": result.time_s, "events": result.events})


def layer_full_s() -> Measurement:
    """One GPT-3 layer forward and backward, 32x8 on meshslice-tpu-fit, MeshSlice K = 8, full fidelity."""
    one_layer = load_model("gpt3-175b").model_copy(update={"layers": 1})
    wall, result = _timed_cold(tp.step, model=one_layer, hardware="meshslice-tpu-fit", mesh="32x8",
                               algorithm="meshslice", slices=8, fidelity="full")
    return Measurement(wall, "s", {"simulated_s": result.step_time_s})


def gemm_symmetric_ms() -> Measurement:
    """The GeMM of gemm_full_s in symmetric fidelity: median of 5 warm calls, each really simulated."""
    args = dict(hardware="meshslice-tpu-fit", mesh="16x16", algorithm="meshslice", dataflow="os", slices=8,
                fidelity="symmetric", **FF1)
    context = Context()
    context.timings.enabled = False  # warm means imports and registries, not a cached answer
    tp.gemm(**args, context=context)
    walls = []
    for _ in range(5):
        begin = time.perf_counter()
        result = tp.gemm(**args, context=context)
        walls.append(time.perf_counter() - begin)
    return Measurement(1e3 * statistics.median(walls), "ms", {"simulated_s": result.time_s})


def gemm_analytic_us() -> Measurement:
    """The closed-form twin of the same GeMM (``analytic_gemm``, the mapping built once): median of 50 calls."""
    hardware = load_hardware("meshslice-tpu-fit")
    mapping = place_mesh(hardware, 16, 16)
    problem = GemmProblem(FF1["m"], FF1["n"], FF1["k"], Dataflow.OS)
    params = GemmParams(Prefetch.IDEAL, slices=8)
    algorithm = get_algorithm("meshslice")
    walls = []
    for _ in range(50):
        begin = time.perf_counter()
        twin = analytic_gemm(algorithm, problem, params, network_for(hardware, mapping))
        walls.append(time.perf_counter() - begin)
    return Measurement(1e6 * statistics.median(walls), "us", {"simulated_s": twin})


def step_symmetric_s() -> Measurement:
    """GPT-3 step, 2048 chips as 256x8 on meshslice-sim, MeshSlice K = 3, fidelity auto, cold cache."""
    wall, result = _timed_cold(tp.step, model="gpt3-175b", hardware="meshslice-sim", mesh="256x8",
                               algorithm="meshslice", slices=3)
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity})


def tune_s() -> Measurement:
    """Default tune for GPT-3 at 2048 chips on meshslice-sim (memory ignored), cold cache."""
    wall, result = _timed_cold(tp.tune, model="gpt3-175b", hardware="meshslice-sim", chips=2048, ignore_memory=True)
    return Measurement(wall, "s", {"best_mesh": result.best.mesh, "best_step_s": result.best.step_time_s})


def _subprocess(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds and standard output of a child process that must succeed."""
    import subprocess

    begin = time.perf_counter()
    completed = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - begin
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {completed.stderr.strip()}")
    return wall, completed.stdout


def reproduce_quick_s() -> Measurement:
    """``tpusim reproduce all --quick --out <fresh temporary folder>`` exactly as typed (``--jobs`` left at its
    default, one worker process per CPU: 2 here), run as ``python -m tpusim`` in a fresh child process (cold
    cache); the wall time of the whole child, start-up included."""
    wall, stdout, _ = _reproduce("reproduce_quick_s")
    return Measurement(wall, "s", {"printed": stdout.strip().splitlines()})


STARTUP_COMMAND = ["collective", "--hardware", "tpuv4", "--topology", "torus:16", "--mesh", "1x16", "--axis", "1",
                   "--op", "all-gather", "--bytes", "64MB", "--json"]
STARTUP_PROCESSES = 5  # fresh processes per run of the figure; their median is the figure


def _startup(command: list[str]) -> tuple[list[float], float, str, str]:
    """Whole-process wall times of ``tpusim COMMAND`` in ``STARTUP_PROCESSES`` fresh processes, with the untimed
    compiling run's, the last one's standard output and the name of the program run.

    The children compile their bytecode once, in an untimed first run, into a cache folder of their own, as an
    installed package has it (``PYTHONDONTWRITEBYTECODE`` would otherwise make every start recompile tpusim).
    """
    with tempfile.TemporaryDirectory() as folder:
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = folder
        # the installed `tpusim` script, as a user types it; `python -m tpusim` where there is none (it adds runpy)
        script = Path(sys.executable).with_name("tpusim")
        argv = [str(script) if script.exists() else sys.executable, *([] if script.exists() else ["-m", "tpusim"]),
                *command]
        compile_run, _ = _subprocess(argv, env)
        runs = [_subprocess(argv, env) for _ in range(STARTUP_PROCESSES)]
    return [wall for wall, _ in runs], compile_run, runs[-1][1], Path(argv[0]).name


def startup_small_collective_s() -> Measurement:
    """Whole-process wall time of ``tpusim collective`` (a 64 MB all-gather over 16 chips, ``--json``): the median
    of five fresh processes."""
    walls, compile_run, stdout, program = _startup(STARTUP_COMMAND)
    result = json.loads(stdout)
    return Measurement(statistics.median(walls), "s", {"processes_s": walls, "compile_run_s": compile_run,
                                                       "simulated_s": result["time_s"], "events": result["events"],
                                                       "command": program})


def startup_version_s() -> Measurement:
    """Whole-process wall time of ``tpusim --version``: the median of five fresh processes."""
    walls, compile_run, stdout, program = _startup(["--version"])
    return Measurement(statistics.median(walls), "s", {"processes_s": walls, "compile_run_s": compile_run,
                                                       "printed": stdout.strip(), "command": program})


def peak_rss_mb_gemm_2048_full() -> Measurement:
    """Peak resident memory of a full-fidelity MeshSlice GeMM (GPT-3 FF1 at 2048 sequences) on 256x8.

    The child reads its own high-water mark, ``VmHWM`` of /proc/self/status, which exec resets. Not its
    ``ru_maxrss``: that keeps the peak of the process it was started from, which here is this script, grown by
    the figures before this one."""
    return _child_peak("tp.gemm(hardware='meshslice-tpu-fit', mesh='256x8', algorithm='meshslice', dataflow='os', "
                       "slices=3, fidelity='full', m=2048*2048, k=12288, n=49152)")


def _child_peak(call: str) -> Measurement:
    """Peak resident memory of a fresh process that runs ``tpusim.api`` ``call`` (Python source using ``tp``),
    read by the child itself from its ``VmHWM``."""
    code = (f"import tpusim.api as tp; {call}; "
            "print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))")
    _, out = _subprocess([sys.executable, "-c", code])
    return Measurement(int(out.strip().splitlines()[-1]) / 1024, "MB")  # VmHWM is in kB (KiB)


POD_LAYOUT = "16x16x16"  # a whole TPUv4 pod: 16 data-parallel replicas of a 16x16 MeshSlice mesh
POD_STRAGGLER = dict(model="gpt3-175b", hardware="tpuv4", mesh=POD_LAYOUT, algorithm="meshslice", slices=4,
                     slow_chips=["3:1.5"], fidelity="full")


def pod_straggler_full_s() -> Measurement:
    """GPT-3 step on a 4096-chip TPUv4 pod (16x16x16: D = 16 replicas of 16x16), one chip 1.5x slower, full
    fidelity, cold cache."""
    wall, result = _timed_cold(tp.step, **POD_STRAGGLER)
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity,
                                   "notes": result.notes})


def peak_rss_mb_pod_straggler() -> Measurement:
    """Peak resident memory of ``pod_straggler_full_s``'s step, in a child process that reads its own ``VmHWM``
    (see ``peak_rss_mb_gemm_2048_full``)."""
    return _child_peak(f"tp.step(**{POD_STRAGGLER!r})")


def pod_step_symmetric_s() -> Measurement:
    """GPT-3 step on a 4096-chip TPUv4 pod (16x16x16), MeshSlice K = 4, fidelity auto (symmetric), cold cache."""
    wall, result = _timed_cold(tp.step, model="gpt3-175b", hardware="tpuv4", mesh=POD_LAYOUT, algorithm="meshslice",
                               slices=4)
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity})


def pod_tune_s() -> Measurement:
    """``tpusim tune --model gpt3-175b --hardware tpuv4 --chips 4096 --json`` (the CLI defaults: every layout
    D x R x C of every legal slice shape, memory feasible), run in-process through ``tpusim.cli.main.main`` on the
    fresh memory-only context it builds (``_cli``)."""
    return _tune_figure("pod_tune_s")


def step_405b_512_symmetric_s() -> Measurement:
    """Llama 3.1 405B step on 512 TPU v5p chips (8x8x8) as fsdp 64 x tensor 8 (Megatron 1D), batch 512, full
    recomputation, fused causal attention, embedding and optimizer, fidelity symmetric, cold cache."""
    wall, result = _timed_cold(tp.step, model="llama3.1-405b", hardware="tpuv5p", layout="fsdp=64,tensor=8",
                               algorithm="tp1d", batch=512, recompute="full", attention="fused-causal",
                               embedding=True, optimizer=True, fidelity="symmetric")
    return Measurement(wall, "s", {"simulated_s": result.step_time_s, "fidelity": result.fidelity,
                                   "memory_gb": result.memory_bytes_per_chip / 1e9})


def validate_measurements_s() -> Measurement:
    """``validate --measurements`` over the shipped table of measured runs: every row read, mapped to its step
    request and simulated where tpusim supports it, cold cache."""
    from tpusim.experiments.measurements.compare import RowStatus, compare_measurements

    context = _cold()
    begin = time.perf_counter()
    rows = compare_measurements(context=context)
    wall = time.perf_counter() - begin
    return Measurement(wall, "s", {"rows": len(rows), "ok": sum(row.status is RowStatus.OK for row in rows)})


OUT = "{out}"
"""In a command's argv: replaced by a fresh empty temporary folder each run."""
LLAMA_405B_OFFLOAD = "decoder_layer_input,query_proj,key_proj,value_proj,out_proj"
"""What MaxText's Llama 3.1 405B run on two v6e-256 slices offloads to host (tpu-recipes
training/trillium/Llama3.1-405B-MaxText, ``llama3_1_405b_8192_fsdp_dcn``: remat_policy custom): with recompute full
the 126 saved layer inputs alone (33.8 GB per chip at batch 1 x 8192 tokens) overflow a v6e's 31.25 GiB."""

USER_COMMANDS: dict[str, tuple[str, ...]] = {
    "plan_gpt3_256_tpuv4_s": ("plan", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "256", "--json"),
    "plan_gpt3_4096_tpuv4_s": ("plan", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "4096", "--json"),
    "tune_gpt3_256_tpuv4_s": ("tune", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "256", "--json"),
    "pod_tune_s": ("tune", "--model", "gpt3-175b", "--hardware", "tpuv4", "--chips", "4096", "--json"),
    "step_gpt3_256_tpuv4_s": ("step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--mesh", "256x1",
                              "--algorithm", "meshslice", "--slices", "18,6,24,24", "--dataflows", "ls,ls,ls,os",
                              "--json"),
    "step_summa_gpt3_256_tpuv4_s": ("step", "--model", "gpt3-175b", "--hardware", "tpuv4", "--mesh", "32x8",
                                    "--algorithm", "summa", "--json"),
    "step_405b_dcn_fsdp_v6e_s": ("step", "--model", "llama3.1-405b", "--hardware", "tpuv6e",
                                 "--layout", "dcn_fsdp=2,fsdp=256", "--algorithm", "tp1d", "--batch", "512",
                                 "--recompute", "custom", "--remat-offload", LLAMA_405B_OFFLOAD,
                                 "--attention", "fused-causal", "--embedding", "--optimizer", "--json"),
    "validate_calibration_s": ("validate", "--measurements", "configs/measurements/calibration.csv"),
    "reproduce_headline_tpuv4_s": ("reproduce", "headline", "--hardware", "tpuv4", "--out", OUT),
    "reproduce_quick_s": ("reproduce", "all", "--quick", "--out", OUT),
}
"""The command line (after ``tpusim``) each user-command figure times, as a user types it."""

REPOSITORY = Path(__file__).resolve().parent.parent
"""Where the commands run: ``configs/measurements/calibration.csv`` is relative to the repository's root."""


def _cli(name: str) -> tuple[float, dict[str, Any] | str, str]:
    """Wall seconds, standard output (parsed when the command has ``--json``) and standard error of the command of
    ``USER_COMMANDS[name]``, run in this process through the command line's own entry point,
    ``tpusim.cli.main.main(argv)``, from the repository's root: parsing, the command's own cost estimate
    (``announce_cost``), the simulation and the output, all timed. ``main`` builds a fresh memory-only context for
    every command (``TPUSIM_CACHE_DIR`` is unset by this script), so each run is cold. Not timed: the interpreter's
    start-up and the imports this script has already done (the ``startup_*`` figures time those)."""
    from tpusim.cli.main import main as tpusim_main

    argv = list(USER_COMMANDS[name])
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(REPOSITORY)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            begin = time.perf_counter()
            status = tpusim_main(argv)
            wall = time.perf_counter() - begin
    finally:
        os.chdir(here)
    if status != 0:
        raise RuntimeError(f"tpusim {' '.join(argv)} exited {status}: {err.getvalue().strip()}")
    stdout = out.getvalue()
    return wall, json.loads(stdout) if "--json" in argv else stdout, err.getvalue().strip()


def _reproduce(name: str) -> tuple[float, str, list[dict[str, str]]]:
    """Wall seconds, standard output and the CSV rows of the family of ``tpusim reproduce`` command
    ``USER_COMMANDS[name]``, run as ``python -m tpusim`` in a fresh child process with ``--out`` a fresh empty
    temporary folder."""
    import csv

    with tempfile.TemporaryDirectory() as folder:
        argv = [folder if word == OUT else word for word in USER_COMMANDS[name]]
        wall, stdout = _subprocess([sys.executable, "-m", "tpusim", *argv])
        family = argv[1]
        rows: list[dict[str, str]] = []
        if family != "all":
            with open(Path(folder) / family / f"{family}.csv", newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
    return wall, stdout, rows


def _choice(choice: dict[str, Any] | None) -> dict[str, Any] | None:
    """What identifies a tuned or planned configuration and its answer, from its JSON."""
    if choice is None:
        return None
    keys = ("algorithm", "mesh", "slice_shape", "layout", "named_layout", "dataflows", "transposes", "slices",
            "step_time_s", "mfu", "recompute", "microbatches", "memory_bytes_per_chip")
    return {key: choice[key] for key in keys if key in choice}


def _tune_figure(name: str) -> Measurement:
    wall, result, stderr = _cli(name)
    assert isinstance(result, dict)
    return Measurement(wall, "s", {"command": " ".join(USER_COMMANDS[name]), "estimate": stderr,
                                   "best": _choice(result["best"]), "runner_up": _choice(result["runner_up"]),
                                   "meshes": len(result["meshes"]), "evaluated": result["evaluated"],
                                   "steps_simulated": result["steps_simulated"]})


def _plan_figure(name: str) -> Measurement:
    wall, result, stderr = _cli(name)
    assert isinstance(result, dict)
    candidates = result["candidates"]
    return Measurement(wall, "s", {"command": " ".join(USER_COMMANDS[name]), "estimate": stderr,
                                   "candidates": len(candidates), "best": _choice(candidates[0]),
                                   "ranked": [(c["algorithm"], c["named_layout"], c["step_time_s"])
                                              for c in candidates]})


def _step_figure(name: str) -> Measurement:
    wall, result, stderr = _cli(name)
    assert isinstance(result, dict)
    keys = ("model", "hardware", "algorithm", "mesh", "named_layout", "chips", "batch", "microbatches", "dataflows",
            "slices", "recompute", "fidelity", "step_time_s", "mfu", "memory_bytes_per_chip", "memory_feasible",
            "feasible")
    return Measurement(wall, "s", {"command": " ".join(USER_COMMANDS[name]), "estimate": stderr,
                                   **{key: result[key] for key in keys}})


def plan_gpt3_256_tpuv4_s() -> Measurement:
    """``tpusim plan --model gpt3-175b --hardware tpuv4 --chips 256 --json``, in-process (``_cli``)."""
    return _plan_figure("plan_gpt3_256_tpuv4_s")


def plan_gpt3_4096_tpuv4_s() -> Measurement:
    """``tpusim plan --model gpt3-175b --hardware tpuv4 --chips 4096 --json``, in-process (``_cli``)."""
    return _plan_figure("plan_gpt3_4096_tpuv4_s")


def tune_gpt3_256_tpuv4_s() -> Measurement:
    """``tpusim tune --model gpt3-175b --hardware tpuv4 --chips 256 --json`` (the CLI defaults), in-process
    (``_cli``)."""
    return _tune_figure("tune_gpt3_256_tpuv4_s")


def step_gpt3_256_tpuv4_s() -> Measurement:
    """``tpusim step --model gpt3-175b --hardware tpuv4 --mesh 256x1 --algorithm meshslice --slices 18,6,24,24
    --dataflows ls,ls,ls,os --json``, in-process (``_cli``)."""
    return _step_figure("step_gpt3_256_tpuv4_s")


def step_summa_gpt3_256_tpuv4_s() -> Measurement:
    """``tpusim step --model gpt3-175b --hardware tpuv4 --mesh 32x8 --algorithm summa --json``, in-process
    (``_cli``)."""
    return _step_figure("step_summa_gpt3_256_tpuv4_s")


def step_405b_dcn_fsdp_v6e_s() -> Measurement:
    """``tpusim step --model llama3.1-405b --hardware tpuv6e --layout dcn_fsdp=2,fsdp=256 --algorithm tp1d
    --batch 512 --recompute custom --remat-offload decoder_layer_input,query_proj,key_proj,value_proj,out_proj
    --attention fused-causal --embedding --optimizer --json``, in-process (``_cli``): two v6e-256 slices, FSDP over
    DCN, as MaxText's ``llama3_1_405b_8192_fsdp_dcn`` run (per-device batch 1, flash attention, host offload;
    ``LLAMA_405B_OFFLOAD``), with what the measured-runs mapping adds to every row (``tp1d``, embedding and
    optimizer: tpusim/experiments/measurements/convert.py)."""
    return _step_figure("step_405b_dcn_fsdp_v6e_s")


def validate_calibration_s() -> Measurement:
    """``tpusim validate --measurements configs/measurements/calibration.csv``, in-process (``_cli``) from the
    repository's root: the whole shipped table of measured runs read, mapped and simulated, its text printed."""
    wall, printed, stderr = _cli("validate_calibration_s")
    assert isinstance(printed, str)
    lines = printed.strip().splitlines()
    rows = [line.split() for line in lines[2:] if len(line.split()) >= 6 and not line.split()[0].endswith(":")]
    rows = [row for row in rows if row[5].startswith(("ok", "unsupported"))]
    return Measurement(wall, "s", {"command": " ".join(USER_COMMANDS["validate_calibration_s"]),
                                   "rows": len(rows), "ok": sum(row[5] == "ok" for row in rows),
                                   "simulated_s": {row[0]: row[3] for row in rows},
                                   "summary": lines[2 + len(rows):], "stderr": stderr})


def reproduce_headline_tpuv4_s() -> Measurement:
    """``tpusim reproduce headline --hardware tpuv4 --out <fresh temporary folder>`` (full search, not ``--quick``;
    ``--jobs`` left at its default, one worker process per CPU: 2 here), run as ``python -m tpusim`` in a fresh
    child process (cold cache); the wall time of the whole child, start-up included."""
    wall, stdout, rows = _reproduce("reproduce_headline_tpuv4_s")
    return Measurement(wall, "s", {"command": " ".join(USER_COMMANDS["reproduce_headline_tpuv4_s"]),
                                   "rows": len(rows), "printed": stdout.strip().splitlines()})


BENCHMARKS: dict[str, Callable[[], Measurement]] = {
    "collective_transfers_per_s": collective_transfers_per_s,
    "allgather_torus_64x32_full_s": allgather_torus_64x32_full_s,
    "allgather_ring_2048_full_s": allgather_ring_2048_full_s,
    "ring_bytes_per_transfer": ring_bytes_per_transfer,
    "gemm_full_s": gemm_full_s,
    "layer_full_s": layer_full_s,
    "gemm_symmetric_ms": gemm_symmetric_ms,
    "gemm_analytic_us": gemm_analytic_us,
    "step_symmetric_s": step_symmetric_s,
    "tune_s": tune_s,
    "reproduce_quick_s": reproduce_quick_s,
    "peak_rss_mb_gemm_2048_full": peak_rss_mb_gemm_2048_full,
    "startup_small_collective_s": startup_small_collective_s,
    "startup_version_s": startup_version_s,
    "pod_straggler_full_s": pod_straggler_full_s,
    "peak_rss_mb_pod_straggler": peak_rss_mb_pod_straggler,
    "pod_step_symmetric_s": pod_step_symmetric_s,
    "pod_tune_s": pod_tune_s,
    "step_405b_512_symmetric_s": step_405b_512_symmetric_s,
    "validate_measurements_s": validate_measurements_s,
    "plan_gpt3_256_tpuv4_s": plan_gpt3_256_tpuv4_s,
    "plan_gpt3_4096_tpuv4_s": plan_gpt3_4096_tpuv4_s,
    "tune_gpt3_256_tpuv4_s": tune_gpt3_256_tpuv4_s,
    "step_gpt3_256_tpuv4_s": step_gpt3_256_tpuv4_s,
    "step_summa_gpt3_256_tpuv4_s": step_summa_gpt3_256_tpuv4_s,
    "step_405b_dcn_fsdp_v6e_s": step_405b_dcn_fsdp_v6e_s,
    "validate_calibration_s": validate_calibration_s,
    "reproduce_headline_tpuv4_s": reproduce_headline_tpuv4_s,
}

TARGETS: dict[str, tuple[str, float]] = {
    "collective_transfers_per_s": (">=", 4e5),
    "allgather_torus_64x32_full_s": ("<=", 1.0),
    "allgather_ring_2048_full_s": ("<=", 14),
    "ring_bytes_per_transfer": ("<=", 150),
    "gemm_full_s": ("<=", 0.5),
    "layer_full_s": ("<=", 5),
    "gemm_symmetric_ms": ("<=", 5),
    "step_symmetric_s": ("<=", 1),
    "tune_s": ("<=", 5),
    "reproduce_quick_s": ("<=", 180),
    "peak_rss_mb_gemm_2048_full": ("<=", 500),
    "startup_small_collective_s": ("<=", 0.15),
    "startup_version_s": ("<=", 0.1),
    "pod_straggler_full_s": ("<=", 120),
    "peak_rss_mb_pod_straggler": ("<=", 4096),
    "pod_step_symmetric_s": ("<=", 1),
    "pod_tune_s": ("<=", 30),
    "step_405b_512_symmetric_s": ("<=", 5),
    "validate_measurements_s": ("<=", 60),
    "plan_gpt3_256_tpuv4_s": ("<=", 60),
    "plan_gpt3_4096_tpuv4_s": ("<=", 180),
    "tune_gpt3_256_tpuv4_s": ("<=", 5),
    "step_gpt3_256_tpuv4_s": ("<=", 1),
    "step_summa_gpt3_256_tpuv4_s": ("<=", 10),
    "step_405b_dcn_fsdp_v6e_s": ("<=", 20),
    "validate_calibration_s": ("<=", 30),
    "reproduce_headline_tpuv4_s": ("<=", 900),
}
"""Each figure's target (benchmarks/README.md): (comparison, value). ``gemm_analytic_us`` has none."""


def target_met(name: str, value: float) -> bool | None:
    """Whether ``value`` meets the target of figure ``name``; None when it has no target."""
    if name not in TARGETS:
        return None
    comparison, target = TARGETS[name]
    return value <= target if comparison == "<=" else value >= target


def _benchmark_names(text: str) -> list[str]:
    """``--only``: one benchmark name or several, comma-separated."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown benchmark {(unknown or [text])[0]!r}; valid: "
                                         f"{', '.join(BENCHMARKS)}")
    return names


def run(names: list[str], repeat: int) -> dict[str, Any]:
    load_start = os.getloadavg()  # 1, 5 and 15 minute load averages: the figures mean nothing without them
    figures: dict[str, Any] = {}
    for name in names:
        runs: list[Measurement] = []
        for k in range(repeat):
            print(f"{name}: run {k + 1}/{repeat} ...", file=sys.stderr, flush=True)
            runs.append(BENCHMARKS[name]())
            closed = runs[-1].info.get("closed_form_s")
            if closed is not None and abs(runs[-1].info["simulated_s"] - closed) > 1e-9 * closed:
                raise SystemExit(f"{name}: simulated {runs[-1].info['simulated_s']!r} s differs from its closed "
                                 f"form {closed!r} s")
            print(f"{name}: {runs[-1].value:.6g} {runs[-1].unit}", file=sys.stderr, flush=True)
        figures[name] = {
            "median": statistics.median(m.value for m in runs),
            "unit": runs[0].unit,
            "runs": [m.value for m in runs],
            "info": runs[0].info,
            "target": TARGETS.get(name),
            "met": target_met(name, statistics.median(m.value for m in runs)),
        }
    return {
        "repeat": repeat,
        "load_start": list(load_start),
        "load_end": list(os.getloadavg()),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "benchmarks": figures,
    }


def table(report: dict[str, Any]) -> str:
    """The report as text: one row per figure with its median, its target and whether it is met, between the load
    averages at the start and the end of the run."""
    def load(key: str) -> str:
        return " ".join(f"{value:.2f}" for value in report[key])

    lines = [f"load average (1, 5, 15 min) at start: {load('load_start')}"]
    for name, figure in report["benchmarks"].items():
        target = figure["target"]
        wanted = "no target" if target is None else f"{target[0]} {target[1]:g}"
        met = {None: "", True: "met", False: "NOT MET"}[figure["met"]]
        lines.append(f"{name:32s} {figure['median']:12.6g} {figure['unit']:12s} {wanted:12s} {met}".rstrip())
    lines.append(f"load average (1, 5, 15 min) at end: {load('load_end')}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="exactly one JSON object on stdout")
    parser.add_argument("--repeat", type=int, default=3, help="runs per benchmark; the median is reported")
    parser.add_argument("--only", action="extend", type=_benchmark_names, metavar="NAME[,NAME...]",
                        help="run only these benchmarks, in this order (comma-separated or repeated)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat {args.repeat} must be >= 1")
    os.environ.pop(CACHE_ENV, None)  # every figure names its own cold cache
    report = run(args.only or list(BENCHMARKS), args.repeat)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
