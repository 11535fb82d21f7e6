"""Named layouts (``layout``: data, fsdp, tensor): a layout is its D x R x C mesh, fsdp at ZeRO 3 and data at the
request's stage (the result dictionaries are equal), its canonical name is reported, and bad layouts are one line
with exit 2 (docs/workloads.md#layouts)."""

from __future__ import annotations

import pytest

import tpusim.api as tp
from tests.panels import plan_panel_bytes
from tests.refusals import refusal
from tpusim.collectives.dcn import dcn_twin
from tpusim.config import TransformerModel
from tpusim.config.layout import NamedLayout, layout_name, parse_layout
from tpusim.errors import UserError
from tpusim.hardware import load_hardware
from tpusim.model.memory import layout_state_bytes_per_param
from tpusim.vocabulary import CollectiveOp, Prefetch, Recompute

TINY = TransformerModel(name="tiny", description="test model", layers=6, hidden=512, heads=8, head_dim=64,
                        ffn=2048, sequence=64)
COMMON = {"model": TINY, "hardware": "tpuv4", "topology": "4x4x4", "algorithm": "summa", "batch": 64,
          "ignore_memory": True}


@pytest.mark.parametrize("text, expected, name", [
    ("fsdp=16,tensor=8", NamedLayout(fsdp=16, rows=8, cols=1), "fsdp=16,tensor=8x1"),
    ("fsdp=256", NamedLayout(fsdp=256), "fsdp=256,tensor=1x1"),
    ("tensor=4x16, data=4", NamedLayout(data=4, rows=4, cols=16), "data=4,tensor=4x16"),
    ("dcn_data=2,fsdp=256,tensor=12", NamedLayout(dcn_data=2, fsdp=256, rows=12, cols=1),
     "dcn_data=2,fsdp=256,tensor=12x1"),
    ("DCN_FSDP=3,data=1,tensor=2x2", NamedLayout(dcn_fsdp=3, rows=2, cols=2), "dcn_fsdp=3,tensor=2x2"),
])
def test_layouts_parse_to_their_axes_and_canonical_name(text: str, expected: NamedLayout, name: str) -> None:
    layout = parse_layout(text)
    assert layout == expected
    assert layout.name == name
    assert layout.chips == (expected.dcn_data * expected.dcn_fsdp * expected.data * expected.fsdp * expected.rows
                            * expected.cols)


def test_a_mesh_is_named_by_its_zero_stage() -> None:
    assert [layout_name(4, 4, 4, stage) for stage in (0, 1, 2, 3)] == ["data=4,tensor=4x4"] * 3 + [
        "fsdp=4,tensor=4x4"]
    assert layout_name(1, 16, 8, 3) == "tensor=16x8"


@pytest.mark.parametrize("tensor", ["4x4", "16"])
@pytest.mark.slow
def test_fsdp_is_the_data_axis_at_zero_stage_3(tensor: str) -> None:
    rows, cols = [*tensor.split("x"), "1"][:2]
    named = tp.step(layout=f"fsdp=4,tensor={tensor}", **COMMON).to_dict()
    mesh = tp.step(mesh=f"4x{rows}x{cols}", zero_stage=3, **COMMON).to_dict()
    assert named == mesh
    assert (named["named_layout"], named["layout"], named["zero_stage"]) == (
        f"fsdp=4,tensor={rows}x{cols}", f"4x{rows}x{cols}", 3)


@pytest.mark.parametrize("stage", [0, 1, 2])
@pytest.mark.slow
def test_data_is_the_data_axis_at_the_requests_zero_stage(stage: int) -> None:
    named = tp.step(layout="data=4,tensor=4x4", zero_stage=stage, **COMMON).to_dict()
    assert named == tp.step(mesh="4x4x4", zero_stage=stage, **COMMON).to_dict()
    assert (named["named_layout"], named["zero_stage"], named["data_parallel"]) == ("data=4,tensor=4x4", stage, 4)


@pytest.mark.slow
def test_a_tensor_only_layout_is_the_plain_mesh() -> None:
    named = tp.step(layout="tensor=8x8", **COMMON).to_dict()
    assert named == tp.step(mesh="8x8", **COMMON).to_dict()
    assert (named["named_layout"], named["data_parallel"], named["zero_stage"]) == ("tensor=8x8", 1, None)


@pytest.mark.slow
def test_the_default_stage_of_a_data_layout_is_the_requests_default() -> None:
    assert tp.step(layout="data=4,tensor=4x4", **COMMON).zero_stage == 1


def test_bad_layouts_raise_user_errors() -> None:
    with pytest.raises(UserError, match="names fsdp twice"):
        parse_layout("fsdp=2,fsdp=4")


STEP = ["step", "--model", "gpt3-175b", "--hardware", "tpuv4"]
VALID = ("valid: comma-separated name=value with names dcn_data, dcn_fsdp, data, fsdp, tensor (tensor=T for a T x 1 "
         "mesh or tensor=RxC), each value a whole number >= 1, e.g. 'fsdp=16,tensor=8'")
CASES = {
    "an unknown axis": ([*STEP, "--layout", "pipeline=4,tensor=64"],
                        f"layout 'pipeline=4,tensor=64': 'pipeline=4' is not name=value with a known name; {VALID}"),
    "a zero size": ([*STEP, "--layout", "fsdp=0,tensor=64"],
                    f"layout 'fsdp=0,tensor=64': fsdp='0' is not a whole number >= 1; {VALID}"),
    "a bad tensor": ([*STEP, "--layout", "fsdp=4,tensor=8y8"],
                     f"layout 'fsdp=4,tensor=8y8': tensor='8y8' is not T or RxC; {VALID}"),
    "mesh and layout": ([*STEP, "--mesh", "4x4x4", "--layout", "fsdp=4,tensor=4x4"],
                        "mesh '4x4x4' and layout 'fsdp=4,tensor=4x4' both given; give exactly one of them"),
    "neither mesh nor layout": (STEP, "one of mesh and layout is required (e.g. mesh '16x16' or layout "
                                      "'fsdp=16,tensor=8')"),
    "dp and layout": ([*STEP, "--dp", "4", "--layout", "fsdp=4,tensor=4x4"],
                      "dp and layout 'fsdp=4,tensor=4x4' both given; the layout names the data-parallel axes"),
    "data and fsdp on ICI": ([*STEP, "--layout", "data=2,fsdp=4,tensor=8"],
                             "layout 'data=2,fsdp=4,tensor=8x1' has both data and fsdp above 1 on ICI, which is not "
                             "supported (one data-parallel axis per slice); use one of them"),
    "a zero stage against fsdp": ([*STEP, "--layout", "fsdp=4,tensor=4x4", "--zero-stage", "1"],
                                  "zero_stage 1 disagrees with layout 'fsdp=4,tensor=4x4', whose fsdp axes are ZeRO "
                                  "stage 3; drop zero_stage or use data="),
    "the product against --chips": ([*STEP, "--layout", "fsdp=4,tensor=4x4", "--chips", "128"],
                                    "layout 'fsdp=4,tensor=4x4' has 64 chips but chips is 128; valid: a layout whose "
                                    "sizes multiply to 128"),
    "the product against the topology": ([*STEP, "--topology", "4x4x4", "--layout", "fsdp=2,tensor=4x4"],
                                         "layout 2x4x4 has 32 chips but topology 'tpuv4:4x4x4' has 64; choose D x R x "
                                         "C = 64"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_layouts_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], name: str) -> None:
    argv, message = CASES[name]
    assert refusal(capsys, [*argv, "--json"]).splitlines() == [message]


# ---------------------------------------------------------------------------------------------- memory


def _state_formula(bpp: float, fsdp: int, data: int, stage: int) -> float:
    """Weights (2 B), gradients (2 B) and optimizer state (the rest): all sharded over fsdp, then over data as
    far as the ZeRO stage says (written out term by term, independently of the module)."""
    weights = 2 / fsdp / (data if stage >= 3 else 1)
    gradients = 2 / fsdp / (data if stage >= 2 else 1)
    optimizer = (bpp - 4) / fsdp / (data if stage >= 1 else 1)
    return weights + gradients + optimizer


def _transients(tokens: int, tensor: int, replicas: int, stage: int, mesh: tuple[int, int],
                slices: list[int | None]) -> float:
    """The working set's transients of TINY under recompute none and unfused attention
    (docs/workloads.md#working-set), written out: two fp32 score-sized tensors, the residual and FF1-output
    gradients in bf16, (its block being one data-parallel collective, the one ahead of it is the next block's)
    two gathered blocks and two buckets, and SUMMA's GeMM panels on ``mesh`` with the step's panel counts
    ``slices`` (tests/panels.py)."""
    h, a, s, f = TINY.hidden, TINY.heads, TINY.sequence, TINY.ffn
    held = 8 * a * s * tokens / tensor + 2 * tokens * (h + f) / tensor
    held += plan_panel_bytes(TINY, "summa", tokens // s, mesh, Prefetch.PREVIOUS_GEMM, Recompute.NONE, tuple(slices))
    block = 2 * TINY.params_per_layer / tensor
    if replicas > 1 and stage >= 2:
        held += 2 * block * (2 if stage >= 3 else 1)
    return held

@pytest.mark.parametrize("fsdp, data, stage", [(1, 1, 1), (16, 1, 1), (1, 8, 0), (1, 8, 1), (1, 8, 2), (1, 8, 3),
                                               (4, 2, 0), (4, 2, 1), (256, 2, 2), (64, 4, 3)])
def test_layout_model_state_per_chip_follows_the_axes(fsdp: int, data: int, stage: int) -> None:
    assert layout_state_bytes_per_param(16.0, fsdp, data, stage) == pytest.approx(
        _state_formula(16.0, fsdp, data, stage), rel=1e-12)


@pytest.mark.parametrize("layout, stage", [("fsdp=4,tensor=4x4", 3), ("data=4,tensor=4x4", 0),
                                           ("data=4,tensor=4x4", 2), ("tensor=8x8", 1)])
@pytest.mark.slow
def test_a_layout_steps_memory_is_the_formula(layout: str, stage: int) -> None:
    fields = {**COMMON, "layout": layout} | ({"zero_stage": stage} if "data" in layout else {})
    result = tp.step(**fields)
    named = parse_layout(layout)
    tensor = named.rows * named.cols
    state = TINY.params_per_layer * TINY.layers * _state_formula(16.0, named.fsdp, named.data, stage) / tensor
    s, b, h, a = TINY.sequence, 64 // named.replicas, TINY.hidden, TINY.heads
    activations = s * b * h * (34 + 5 * a * s / h) * TINY.layers / tensor  # recompute none (memory ignored)
    held = _transients(s * b, tensor, named.replicas, stage if "data" in layout else 3, (named.rows, named.cols),
                       result.slices)
    assert result.memory_bytes_per_chip == pytest.approx(state + activations + held, rel=1e-12)


# ---------------------------------------------------------------------------------------------- across slices

WIRE = {"model": TINY, "hardware": "tpuv4-wire", "topology": "torus:4x4", "algorithm": "meshslice", "slices": 2,
        "ignore_memory": True}


LN1_BACKWARD = ("ln1.norm.bwd", "ln1.psum.bwd")  # what a block's backward runs after QKV's backward-weight GeMM


def _seconds(result: tp.StepResult, ops: tuple[str, ...]) -> float:
    """Seconds ``ops`` take in one block of ``result``."""
    return sum(entry["time_s"] for entry in result.per_layer if entry["op"] in ops)


@pytest.mark.parametrize("slices", [2, 3, 4])
@pytest.mark.slow
def test_the_dcn_all_reduce_of_the_last_bucket_is_what_slices_add(slices: int) -> None:
    # every chip alike (MeshSlice), no overlap limits (tpuv4-wire), a backward block far longer than a bucket's
    # all-reduce: the earlier buckets hide, the last one's DCN all-reduce is the whole difference but for what the
    # ops after QKV's backward-weight GeMM (ln1's backward) hide of it
    many = tp.step(layout=f"dcn_data={slices},tensor=4x4", batch=256 * slices, **WIRE)
    one = tp.step(mesh="4x4", batch=256, **WIRE)
    dcn = load_hardware("tpuv4-wire").dcn
    assert dcn is not None
    # one block's bf16 gradient shard on one of 16 chips: its four matrices are one bucket (within the combine
    # threshold), which leaves with QKV's gradients, before ln1's backward
    bucket = -(-TINY.params_per_layer // 16) * 2
    twin = dcn_twin(dcn, CollectiveOp.ALL_REDUCE, bucket, slices)
    assert _seconds(one, LN1_BACKWARD) < twin < one.compute_s / TINY.layers / 2
    added = twin - _seconds(one, LN1_BACKWARD)
    assert many.step_time_s - one.step_time_s == pytest.approx(added, rel=1e-9)
    assert many.exposed_dcn_comm_s == pytest.approx(added, rel=1e-9)
    assert many.exposed_data_comm_s == pytest.approx(added, rel=1e-9)
    assert (many.named_layout, many.chips, many.dcn_slices, many.dcn_axis, many.mesh, many.batch) == (
        f"dcn_data={slices},tensor=4x4", 16 * slices, slices, "dcn_data", "4x4", 256 * slices)
    assert many.memory_bytes_per_chip == one.memory_bytes_per_chip  # replicated state, the same share of batch
    assert many.mfu == pytest.approx(one.mfu * one.step_time_s / many.step_time_s, rel=1e-12)


@pytest.mark.slow
def test_slices_over_dcn_with_an_ici_fsdp_axis() -> None:
    # the bucket is reduce-scattered over fsdp first, then its 1/F shard all-reduced across the slices
    fields = {**COMMON, "algorithm": "meshslice", "slices": 2, "hardware": "tpuv4-wire"}
    many = tp.step(layout="dcn_data=2,fsdp=4,tensor=4x4", **{**fields, "batch": 128})
    one = tp.step(layout="fsdp=4,tensor=4x4", **fields)
    dcn = load_hardware("tpuv4-wire").dcn
    assert dcn is not None
    block = -(-TINY.params_per_layer // 16)  # one block's parameters on one chip of the 4x4 mesh (one bucket)
    shard = -(-block // 4) * 2  # rounded up to 4 equal parts, one part in bf16
    twin = dcn_twin(dcn, CollectiveOp.ALL_REDUCE, shard, 2)
    # ln1's backward hides part of the ICI reduce-scatter, which takes longer, so all of the DCN all-reduce after
    # it shows
    assert many.step_time_s - one.step_time_s == pytest.approx(twin, rel=1e-9)
    assert (many.named_layout, many.chips, many.zero_stage) == ("dcn_data=2,fsdp=4,tensor=4x4", 128, 3)


@pytest.mark.parametrize("layout, algorithm, topology", [
    ("dcn_data=2,fsdp=4,tensor=4x4", "collective", "4x4x4"), ("dcn_data=4,fsdp=64", "fsdp", "4x4x4"),
    ("dcn_data=2,fsdp=16,tensor=4", "tp1d", "4x4x4"),
    ("dcn_data=4,tensor=1x1", "collective", "1x1x1"),  # slices of one chip, smaller than a host of 4
])
@pytest.mark.slow
def test_symmetric_steps_over_dcn_equal_full_ones(layout: str, algorithm: str, topology: str) -> None:
    """A representative chip stands for its host-mates on the host links (no more than its slice has): with the
    DCN slowed until it is a large part of the step, the step, its exposed DCN time and its compute equal those of
    the run of every chip (the DCN's part of it at most that of the representative)."""
    fields = {**COMMON, "algorithm": algorithm, "batch": 256, "scale": {"dcn": 0.01}, "topology": topology}
    full = tp.step(layout=layout, fidelity="full", **fields)
    symmetric = tp.step(layout=layout, fidelity="symmetric", **fields)
    assert symmetric.fidelity == "symmetric"
    assert full.exposed_dcn_comm_s > 0.2 * full.step_time_s
    for name in ("step_time_s", "compute_s", "exposed_comm_s"):
        assert getattr(symmetric, name) == pytest.approx(getattr(full, name), rel=1e-9), name
    # which part of the exposed time is the DCN's: a full run counts the critical chip's own DCN collectives,
    # which end before its host-mates' (first come, first served on the host's link); the representative's end
    # with its last mate's (docs/network.md#dcn)
    assert full.exposed_dcn_comm_s <= symmetric.exposed_dcn_comm_s * (1 + 1e-9)


@pytest.mark.parametrize("slices", [2, 3, 4])
@pytest.mark.slow
def test_weights_sharded_across_slices_add_two_gathers_and_a_reduce_scatter(slices: int) -> None:
    # dcn_fsdp: every block's weights (one collective: they are within the combine threshold) are all-gathered
    # across the slices one use ahead and its gradients reduce-scattered across them; on tpuv4-wire all hide but
    # the first forward gather (behind ln1), the gather the backward pass opens with (behind the residual's
    # backward) and the last bucket's reduce-scatter (behind ln1's backward), each a DCN twin of one block's bf16
    # shard less the ops that hide it
    # no early gathers: MeshSlice's first-slice prefetch would move the ICI gathers against the DCN ones, which
    # is not what this twin accounts for
    many = tp.step(layout=f"dcn_fsdp={slices},tensor=4x4", batch=256 * slices, fidelity="full", prefetch="none",
                   **WIRE)
    one = tp.step(mesh="4x4", batch=256, prefetch="none", **WIRE)
    dcn = load_hardware("tpuv4-wire").dcn
    assert dcn is not None
    block = -(-TINY.params_per_layer // 16)  # one block's parameters on one chip of the 4x4 mesh
    shard = -(-block // slices) * slices * 2  # padded to equal parts across the slices, in bf16
    gather = dcn_twin(dcn, CollectiveOp.ALL_GATHER, shard, slices)
    exposed = [gather - _seconds(one, ("ln1.norm", "ln1.psum")), gather - _seconds(one, ("residual2.bwd",)),
               dcn_twin(dcn, CollectiveOp.REDUCE_SCATTER, shard, slices) - _seconds(one, LN1_BACKWARD)]
    assert min(exposed) > 0
    assert many.step_time_s - one.step_time_s == pytest.approx(sum(exposed), rel=1e-9)
    assert (many.named_layout, many.dcn_axis, many.zero_stage) == (f"dcn_fsdp={slices},tensor=4x4", "dcn_fsdp", None)


@pytest.mark.slow
def test_symmetric_fidelity_is_refused_with_dcn_fsdp_and_auto_runs_full(capsys: pytest.CaptureFixture[str]) -> None:
    """A gather across slices completes in each host's order, so groups drift apart: no representative stands for
    them (auto runs every chip and says why)."""
    argv = [*STEP, "--layout", "dcn_fsdp=2,tensor=16x16", "--topology", "torus:16x16", "--ignore-memory", "--json"]
    assert refusal(capsys, [*argv, "--fidelity", "symmetric"]).splitlines() == [
        "--fidelity symmetric is not exact here: weights gathered across slices (dcn_fsdp) complete at different "
        "times on a host's chips", "use --fidelity auto or full"]
    ran = tp.step(**{**COMMON, "layout": "dcn_fsdp=2,fsdp=4,tensor=4x4", "batch": 128, "algorithm": "collective"})
    assert ran.fidelity == "full"
    assert "fidelity auto chose full: weights gathered across slices (dcn_fsdp) complete at different times on a " \
           "host's chips" in ran.notes


@pytest.mark.parametrize("across", ["dcn_fsdp", "dcn_data"])
@pytest.mark.slow
def test_memory_of_slices_that_shard_or_replicate_the_state(across: str) -> None:
    """dcn_fsdp shards the state over fsdp x S (ZeRO 3); dcn_data replicates it, one slice's on its share."""
    result = tp.step(**{**COMMON, "layout": f"{across}=2,fsdp=4,tensor=4x4", "batch": 128})
    fsdp = 4 * 2 if across == "dcn_fsdp" else 4
    state = TINY.params_per_layer * TINY.layers * _state_formula(16.0, fsdp, 1, 3) / 16
    s, b, h, a = TINY.sequence, 128 // (2 * 4), TINY.hidden, TINY.heads
    activations = s * b * h * (34 + 5 * a * s / h) * TINY.layers / 16  # recompute none (memory ignored)
    held = _transients(s * b, 16, fsdp, 3, (4, 4), result.slices)
    assert result.memory_bytes_per_chip == pytest.approx(state + activations + held, rel=1e-12)


DCN_CASES = {
    "dcn_data and dcn_fsdp": ([*STEP, "--layout", "dcn_data=2,dcn_fsdp=2,tensor=16x16"],
                              "layout 'dcn_data=2,dcn_fsdp=2,tensor=16x16' has both dcn_data and dcn_fsdp above 1, "
                              "which is not supported (one axis across slices); use one of them"),
    "dcn_fsdp beside an ICI data axis": ([*STEP, "--layout", "dcn_fsdp=2,data=4,tensor=8x8"],
                                         "layout 'dcn_fsdp=2,data=4,tensor=8x8' shards weights across slices "
                                         "(dcn_fsdp) but replicates them over its ICI data axis, which is not "
                                         "supported; use fsdp= on ICI"),
    "a zero stage against dcn_fsdp": ([*STEP, "--layout", "dcn_fsdp=2,tensor=16x16", "--zero-stage", "1"],
                                      "zero_stage 1 disagrees with layout 'dcn_fsdp=2,tensor=16x16', whose fsdp axes "
                                      "are ZeRO stage 3; drop zero_stage or use data="),
    "a calibrated profile": (["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--layout",
                              "dcn_data=2,tensor=16x16"],
                             "layout 'dcn_data=2,tensor=16x16' joins 2 slices over DCN, which profile 'meshslice-sim' "
                             "does not describe (no dcn block); use a physical profile such as 'tpuv4'"),
    "slow chips": ([*STEP, "--layout", "dcn_data=2,tensor=16x16", "--slow-chip", "3:2"],
                   "slow chips or links with layout 'dcn_data=2,tensor=16x16' are not supported: one slice stands "
                   "for all over DCN only while every slice behaves alike"),
    "a data axis at ZeRO 0": ([*STEP, "--layout", "dcn_data=2,data=4,tensor=8x8", "--zero-stage", "0",
                               "--ignore-memory"],
                              "a data axis at ZeRO stage 0 with 2 slices over DCN is not supported (its all-reduce "
                              "would be split around the DCN exchange); use zero_stage 1, 2 or 3"),
    "chips against the slices": ([*STEP, "--layout", "dcn_data=2,tensor=16x16", "--chips", "256"],
                                 "layout 'dcn_data=2,tensor=16x16' has 512 chips but chips is 256; valid: a layout "
                                 "whose sizes multiply to 256"),
}


@pytest.mark.parametrize("name", list(DCN_CASES))
def test_bad_dcn_layouts_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], name: str) -> None:
    argv, message = DCN_CASES[name]
    assert refusal(capsys, [*argv, "--json"]).splitlines() == [message]


def test_a_dataflow_cannot_move_a_one_chip_replicas_step() -> None:
    """On a 1x1 tensor mesh every dataflow is the same local product: the collectives a schedule issues on the
    1-wide axes move nothing and take none of the overlap slots the data-parallel gathers and reduce-scatters
    hold, so the step and its exposed data-parallel communication are the same to the last bit."""
    runs = [tp.step(model=TINY, hardware="tpuv4", topology="2x4x4", layout="data=32,tensor=1x1", algorithm="collective",
                    batch=32, ignore_memory=True, dataflows=dataflows)
            for dataflows in ("ls,ls,ls,ls", "os,os,os,os", "rs,rs,rs,rs", "ls,os,rs,os")]
    assert runs[0].exposed_data_comm_s > 0
    assert {(run.step_time_s, run.exposed_data_comm_s) for run in runs} == {(runs[0].step_time_s,
                                                                           runs[0].exposed_data_comm_s)}
