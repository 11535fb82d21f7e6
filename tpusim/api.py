"""The public Python API: the same operations as the command line, returning typed results.

Every result has ``to_dict()`` (the fields of the CLI's ``--json``) and ``to_frame()`` (a one-row pandas
DataFrame; pandas is imported only then). Errors are :class:`tpusim.errors.TpusimError` subclasses.

>>> import tpusim.api as tp
>>> r = tp.step(model="gpt3-175b", hardware="meshslice-sim", mesh="32x8", algorithm="meshslice",
...             slices=[16, 8, 24, 24])                                          # doctest: +SKIP
>>> r.step_time_s, r.mfu                                                         # doctest: +SKIP
"""

from __future__ import annotations

from tpusim.collectives.simulate import CollectiveResult
from tpusim.experiments.calls import collective, gemm, step, tune
from tpusim.experiments.run import RunSummary, run_experiment
from tpusim.gemm.simulate import GemmResult
from tpusim.model.step import StepResult

__all__ = ["CollectiveResult", "GemmResult", "RunSummary", "StepResult", "collective", "gemm", "run_experiment",
           "step", "tune"]
