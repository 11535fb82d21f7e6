"""The public Python API: the same operations as the command line, returning typed results.

Every function takes keyword arguments only: the fields of its request model (``tpusim.config.requests``; the
signatures below are generated from them, so ``help(tpusim.api.step)`` lists every field) plus ``context``, a
``tpusim.engine.context.Context`` whose caches several calls may share. Results have ``to_dict()`` (the fields
of the CLI's ``--json``) and ``to_frame()`` (a one-row pandas DataFrame; pandas is imported only then). Errors
are :class:`tpusim.errors.TpusimError` subclasses; bad values are ``UserError`` naming the keyword.

>>> import tpusim.api as tp
>>> r = tp.step(model="gpt3-175b", hardware="meshslice-sim", mesh="32x8", algorithm="meshslice",
...             slices=[16, 8, 24, 24])                                          # doctest: +SKIP
>>> r.step_time_s, r.mfu                                                         # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tpusim.collectives.simulate import CollectiveResult
from tpusim.config.requests import CollectiveRequest, GemmRequest, Request, StepRequest, TuneRequest, parse_request
from tpusim.engine.context import Context
from tpusim.experiments.run import RunSummary, run_experiment
from tpusim.experiments.runners import run_collective, run_gemm, run_step, run_tune
from tpusim.experiments.tracing import finish_trace, start_trace
from tpusim.gemm.simulate import GemmResult
from tpusim.model.step import StepResult
from tpusim.tuning.result import TuneResult

__all__ = ["CollectiveResult", "GemmResult", "RunSummary", "StepResult", "TuneResult", "collective", "gemm",
           "run_experiment", "step", "tune"]

_CONTEXT = inspect.Parameter("context", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Context | None")
_TRACE = (
    inspect.Parameter("trace", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | Path | None"),
    inspect.Parameter("trace_chips", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | None"),
)


def _signature(kind: type[Request], extra: tuple[inspect.Parameter, ...], returns: type) -> inspect.Signature:
    parameters = []
    for name, field in kind.model_fields.items():
        if name == "kind":
            continue
        default = inspect.Parameter.empty if field.is_required() else field.get_default(call_default_factory=True)
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                            annotation=field.annotation))
    return inspect.Signature([*parameters, *extra, _CONTEXT], return_annotation=returns)


def _doc(kind: type[Request], summary: str) -> str:
    lines = [summary, "", "Keyword arguments (the fields of ``" + kind.__name__ + "``):"]
    for name, field in kind.model_fields.items():
        if name != "kind":
            lines.append(f"    {name}: {field.description or ''}")
    lines.append("    context: caches to share with other calls (default: a fresh Context)")
    return "\n".join(lines)


def _entry(kind: type[Request], run: Callable[..., Any], name: str, summary: str, returns: type,
           traced: bool = False) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        context = kwargs.pop("context", None)
        if context is not None and not isinstance(context, Context):
            from tpusim.errors import UserError

            raise UserError(f"context {context!r} must be a tpusim Context or None")
        trace, chips = (kwargs.pop("trace", None), kwargs.pop("trace_chips", None)) if traced else (None, None)
        request = parse_request(kind, kwargs)
        if not traced:
            return run(request, context)
        tracer = start_trace(trace, chips)
        result = run(request, context, tracer)
        finish_trace(tracer, trace, result)
        return result

    call.__name__ = call.__qualname__ = name
    call.__doc__ = _doc(kind, summary)
    call.__signature__ = _signature(kind, _TRACE if traced else (), returns)  # type: ignore[attr-defined]
    return call


collective: Callable[..., CollectiveResult] = _entry(
    CollectiveRequest, run_collective, "collective", "Simulate one collective on every group of a logical axis.",
    CollectiveResult)
gemm: Callable[..., GemmResult] = _entry(
    GemmRequest, run_gemm, "gemm", "Simulate one distributed GeMM (optionally verified, optionally traced).",
    GemmResult, traced=True)
step: Callable[..., StepResult] = _entry(
    StepRequest, run_step, "step", "Simulate one training step.", StepResult)
tune: Callable[..., TuneResult] = _entry(
    TuneRequest, run_tune, "tune", "Search mesh shape, per-layer dataflow, transposition and slice count.",
    TuneResult)
