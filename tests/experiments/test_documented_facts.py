"""What the pages say about experiment points and the shipped families is what the code does: the point fields
of docs/results.md#experiment-files are each request's fields, slow chips and links run from a point while an
``overrides:`` key is refused, the memory treatments docs/workloads.md names are the families', and the README
quickstart's step time and MFU quoted in docs/workloads.md are what it simulates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.documents import ROOT, page
from tpusim import api
from tpusim.cli.main import main
from tpusim.config.catalog import EXPERIMENTS
from tpusim.config.requests import CollectiveRequest, GemmRequest, Request, StepRequest, TuneRequest
from tpusim.errors import UserError
from tpusim.experiments.spec import expand, load_experiment
from tpusim.units import GB, format_time

KINDS = {"step": StepRequest, "tune": TuneRequest, "gemm": GemmRequest, "collective": CollectiveRequest}


def _bullets() -> dict[str, set[str]]:
    """The field names (backticked identifiers) of each bullet of the point-field list, by the bullet's lead."""
    text = (ROOT / "docs" / "results.md").read_text()
    block = text[text.index("**Point fields**"):text.index("**Sweep rules.**")]
    bullets = {}
    for bullet in re.split(r"\n- ", block)[1:]:
        lead, rest = bullet.split(" also take ", 1) if " also take " in bullet else bullet.split(":", 1)
        bullets[lead] = set(re.findall(r"`([a-z_]+)`", rest))
    return bullets


def test_the_point_fields_are_each_requests_fields() -> None:
    bullets = _bullets()
    shared = bullets.pop("`collective`, `gemm` and `step`")
    common = bullets.pop("every kind")
    assert common == set(Request.model_fields)
    assert sorted(bullets) == sorted(f"`{kind}`" for kind in KINDS)
    for kind, request in KINDS.items():
        documented = common | bullets[f"`{kind}`"] | (shared if kind != "tune" else set())
        assert documented == set(request.model_fields), kind


TINY = {"kind": "collective", "hardware": "tpuv4", "mesh": "1x4", "axis": 1, "op": "all-gather", "bytes": "4MiB"}


def _experiment(tmp_path: Path, point: dict[str, object]) -> str:
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump({"name": "slow", "point": point,
                                    "sweep": {"grid": {"slow_links": [[], ["y:2"]]}}}))
    return str(path)


def test_a_point_slows_links_as_the_flag_does(tmp_path: Path) -> None:
    points = expand(load_experiment(_experiment(tmp_path, TINY)))
    assert [p.slow_links for p in points] == [[], ["y:2"]]
    ran = [api.collective(**p.model_dump(exclude={"kind"})).time_s for p in points]
    flag = api.collective(**{k: v for k, v in TINY.items() if k != "kind"}, slow_links=["y:2"]).time_s
    assert ran[1] == flag and ran[1] > ran[0]


def test_an_overrides_key_is_refused_naming_the_fields(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"unknown key 'overrides' at point; valid keys: .*slow_chips, slow_links"):
        expand(load_experiment(_experiment(tmp_path, {**TINY, "overrides": {"slow_chips": ["0:2"]}})))


def _memory_treatments() -> dict[str, set[bool]]:
    return {name: {p.ignore_memory for p in expand(load_experiment(name))} for name in EXPERIMENTS.names()}


def _listed(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def test_the_families_memory_treatments_are_those_the_page_names() -> None:
    treatments = _memory_treatments()
    both = sorted(n for n, t in treatments.items() if t == {False, True})
    feasible = sorted(n for n, t in treatments.items() if t == {False})
    ignored = sorted(n for n, t in treatments.items() if t == {True})
    assert len(both) + len(feasible) + len(ignored) == len(treatments)
    sentence = (f"Among the reproduction families, {_listed(both)} run every point both memory feasible and memory "
                f"ignored; {_listed(feasible)} runs memory feasible only; {_listed(ignored)} ignore memory")
    assert sentence in page("docs/workloads.md")


def test_the_quickstart_figures_quoted_are_what_it_simulates() -> None:
    readme = page("README.md")
    command = "tpusim step --model gpt3-175b --hardware meshslice-sim --chips 256 --mesh 32x8 --algorithm " \
              "meshslice --slices 16,8,24,24"
    assert command in readme
    result = api.step(model="gpt3-175b", hardware="meshslice-sim", chips=256, mesh="32x8", algorithm="meshslice",
                      slices=[16, 8, 24, 24])
    seconds = format_time(result.step_time_s).removesuffix(" s")
    quoted = re.search(r"The README's quickstart \(32x8, `meshslice-sim`, S = 16,8,24,24\) simulates ([\d.]+) s, so "
                       r"MFU = ([\d.e]+) / \(256 x ([\d.e]+) x ([\d.]+)\) = ([\d.]+) %", page("docs/workloads.md"))
    assert quoted
    assert quoted.group(1) == quoted.group(4) == seconds
    flops, peak, mfu = float(quoted.group(2)), float(quoted.group(3)), float(quoted.group(5))
    assert f"{result.mfu * 100:.1f}" == quoted.group(5)
    assert flops / (256 * peak * float(seconds)) * 100 == pytest.approx(mfu, abs=0.05)
    assert result.mfu * 256 * 242 * 1024**4 * result.step_time_s == pytest.approx(flops, rel=1e-3)
    # its memory, as the README and docs/workloads.md#memory quote it
    assert result.recompute == "full"
    gb = result.memory_bytes_per_chip / GB
    assert f"needs full activation recomputation ({gb:.1f} GB of the 30.75 GiB a program may fill" in readme
    assert f"{gb:.2f} GB with them as the Quickstart runs it" in page("docs/workloads.md")


@pytest.mark.slow  # every check and every measured run: about 7 s
def test_the_validation_summary_shown_is_what_validate_prints(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "validation.md").read_text()
    block = text[text.index("## The validation table"):]
    block = block[block.index("```\n") + 4:]
    shown = [line for line in block[:block.index("```")].splitlines() if " checks, " in line]
    assert [line.split(":")[0] for line in shown] == ["model", "measurement"]
    assert main(["validate"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert shown == [line for line in printed if line.startswith(("model: ", "measurement: "))]
