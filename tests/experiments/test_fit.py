"""The calibration procedure of achievable rates (tpusim/experiments/measurements/fit.py,
docs/validation.md#calibration): the scalar fit recovers a planted constant, the shipped profiles carry exactly
what the procedure prints, and the calibration rows and the v4-32 comparison meet their bounds."""

from __future__ import annotations

import math

import pytest

from tpusim.experiments.measurements.compare import RowStatus, compare_measurements
from tpusim.experiments.measurements.fit import DIGITS, calibrate, fit_scalar
from tpusim.experiments.validation import EXPLAINED_DIFFERENCES, measured_checks
from tpusim.hardware import load_hardware
from tpusim.hardware.profiles import with_rates


@pytest.mark.parametrize("planted", [0.35, 0.586, 0.869, 1.0])
def test_scalar_fit_recovers_a_planted_efficiency(planted: float) -> None:
    # times of the form a + b / e (fixed costs plus work at the rate): the iteration is exact on them
    fixed, work = [0.5, 2.0, 0.0], [10.0, 3.0, 7.5]
    def simulate(e: float) -> list[float]:
        return [a + b / e for a, b in zip(fixed, work, strict=True)]
    assert fit_scalar(simulate, simulate(planted)) == pytest.approx(planted, abs=1e-5)


def test_scalar_fit_converges_where_time_is_not_linear_in_one_over_e() -> None:
    # a term in 1/e^2 (an HBM-bound piece that becomes compute-bound) breaks the surrogate's form, not the fit
    def simulate(e: float) -> list[float]:
        return [1.0 + 4.0 / e + 0.5 / e**2, 3.0 / e + max(2.0, 1.5 / e)]
    planted = 0.7
    best = fit_scalar(simulate, simulate(planted))
    assert best == pytest.approx(planted, abs=1e-4)


def test_scalar_fit_minimises_the_log_error_of_rows_that_disagree() -> None:
    # two rows wanting 0.5 and 0.8: the least-squares log optimum of b / e is their geometric mean
    def simulate(e: float) -> list[float]:
        return [1.0 / e, 1.0 / e]
    best = fit_scalar(simulate, [1.0 / 0.5, 1.0 / 0.8])
    assert best == pytest.approx(math.sqrt(0.5 * 0.8), abs=1e-5)


@pytest.mark.slow
def test_the_shipped_profiles_carry_the_constants_the_procedure_prints() -> None:
    fitted = {(c.profile, c.name): c.value for c in calibrate().constants}
    shipped = {}
    for profile, name in fitted:
        hardware = load_hardware(profile)
        block, field = name.split(".")
        shipped[(profile, name)] = getattr(getattr(hardware, block), field)
    assert shipped == fitted
    assert set(fitted) == {("tpuv4", "ici.link_efficiency"), ("tpuv4", "chip.mxu_efficiency"),
                           ("tpuv5e", "chip.mxu_efficiency"), ("tpuv5p", "chip.mxu_efficiency"),
                           ("tpuv6e", "chip.mxu_efficiency")}
    # the newer generations inherit tpuv4's link efficiency (an assumption, docs/validation.md#calibration)
    for name in ("tpuv5e", "tpuv5p", "tpuv6e"):
        assert load_hardware(name).ici.link_efficiency == fitted[("tpuv4", "ici.link_efficiency")]
    assert all(round(value, DIGITS) == value for value in fitted.values())


@pytest.mark.slow
def test_every_calibration_row_is_within_eleven_percent_of_its_measurement() -> None:
    """Every row within 10 % but the v5e 32B one (+10.35 %): the model gives the 16B run on 1, 4 and 32 slices the
    same step time to 1 ms, where the runs measured +2.6 % and +11.1 %, so v5e's one constant takes in the 32-slice
    row's extra second and the 32B row pays for it (docs/validation.md#calibration). Should tpusim gain a cost
    across slices, the 16B rows spread apart and this test says so."""
    rows = {row.id: row for row in compare_measurements()}
    assert len(rows) == 11
    assert all(row.status is RowStatus.OK for row in rows.values())
    worst = max(abs(row.delta or math.inf) for row in rows.values())
    assert worst <= 0.11
    assert {name for name, row in rows.items() if abs(row.delta or math.inf) > 0.10} == {"mt-v5e-32b-1x"}
    sixteen = [rows[f"mt-v5e-16b-{n}x"].simulated_step_time_s or math.inf for n in (1, 4, 32)]
    assert max(sixteen) - min(sixteen) < 0.002  # measured: 10.659 s, 10.932 s, 11.843 s


@pytest.mark.slow
def test_the_v4_32_comparison_is_within_its_bounds_at_the_derived_link_efficiency() -> None:
    checks = measured_checks(EXPLAINED_DIFFERENCES)
    assert len(checks) == 48
    assert sum(abs(c.delta) for c in checks) / len(checks) <= 0.10
    assert all(c.ok for c in checks)
    assert all(c.within for c in checks if not c.explained)


def test_the_wire_and_calibrated_profiles_keep_their_peaks() -> None:
    for name in ("tpuv4-wire", "meshslice-sim", "meshslice-tpu-fit"):
        chip = load_hardware(name).chip
        assert (chip.mxu_efficiency, chip.hbm_efficiency) == (1.0, 1.0)
    assert load_hardware("tpuv4-wire").ici.link_efficiency == 1.0


def test_with_rates_refuses_links_on_a_calibrated_profile() -> None:
    with pytest.raises(ValueError, match="no ICI links"):
        with_rates(load_hardware("meshslice-sim"), link=0.9)
