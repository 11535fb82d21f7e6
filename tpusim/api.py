"""The public Python API: the same operations as the command line, returning typed results.

Every function takes keyword arguments only: the fields of its request model (``tpusim.config.requests``; the
signatures below are generated from them, so ``help(tpusim.api.step)`` lists every field) plus ``context``, a
``tpusim.engine.context.Context`` whose caches several calls may share. Results have ``to_dict()`` (the fields
of the CLI's ``--json``) and ``to_frame()`` (a one-row pandas DataFrame; pandas is imported only then);
``run_experiment`` returns a ``RunSummary`` whose ``to_frame()`` is the run's results.csv as a DataFrame, one row
per point, with the dtypes ``pandas.read_csv`` gives it (docs/results.md#the-columns-of-resultscsv). Errors
are :class:`tpusim.errors.TpusimError` subclasses (also importable from here, ``tp.TpusimError``,
``tp.UserError``); bad values are ``UserError`` naming the keyword. ``model(NAME_OR_PATH)`` returns a model's
dimensions (hidden size, heads, FF width, sequence length, ...), for a packaged model or your own YAML file.

>>> import tpusim.api as tp
>>> r = tp.step(model="gpt3-175b", hardware="meshslice-sim", mesh="32x8", algorithm="meshslice",
...             slices=[16, 8, 24, 24])                                          # doctest: +SKIP
>>> r.step_time_s, r.mfu                                                         # doctest: +SKIP
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpusim.collectives.simulate import CollectiveResult
from tpusim.config.model import TransformerModel
from tpusim.config.requests import CollectiveRequest, GemmRequest, Request, StepRequest, TuneRequest, parse_request
from tpusim.engine.context import Context
from tpusim.errors import TpusimError, UserError
from tpusim.experiments.run import RunSummary, run_experiment
from tpusim.experiments.runners import run_collective, run_gemm, run_step, run_tune
from tpusim.experiments.tracing import finish_trace, start_trace
from tpusim.gemm.simulate import GemmResult
from tpusim.model.registry import load_model
from tpusim.model.step import StepResult
from tpusim.tuning.result import TuneResult

__all__ = ["CollectiveResult", "GemmResult", "RunSummary", "StepResult", "TpusimError", "TransformerModel",
           "TuneResult", "UserError", "collective", "gemm", "model", "run_experiment", "step", "tune"]

_CONTEXT = inspect.Parameter("context", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Context | None")
_JOBS = inspect.Parameter("jobs", inspect.Parameter.KEYWORD_ONLY, default=1, annotation="int")
_TRACE_CHIPS = inspect.Parameter("trace_chips", inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation="str | None")


def _trace_parameters(keyword: str | None) -> tuple[inspect.Parameter, ...]:
    """The trace file's keyword (``trace``; ``trace_best`` for ``tune``) and ``trace_chips``."""
    if keyword is None:
        return ()
    return (inspect.Parameter(keyword, inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | Path | None"),
            _TRACE_CHIPS)


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
           traced: str | None = None, options: tuple[inspect.Parameter, ...] = ()) -> Callable[..., Any]:
    """The API function of ``kind``; ``traced`` names its trace-file keyword, if it writes traces; ``options`` are
    keywords of how it runs (not of the request), handed to ``run`` as they are."""
    def call(**kwargs: Any) -> Any:
        how = {option.name: kwargs.pop(option.name) for option in options if option.name in kwargs}
        context = kwargs.pop("context", None)
        if context is not None and not isinstance(context, Context):
            raise UserError(f"context {context!r} must be a tpusim Context or None")
        trace, chips = (kwargs.pop(traced, None), kwargs.pop("trace_chips", None)) if traced else (None, None)
        request = parse_request(kind, kwargs)
        if not traced:
            return run(request, context, **how)
        tracer = start_trace(trace, chips, traced)
        result = run(request, context, tracer=tracer, **how)
        finish_trace(tracer, trace, result)
        return result

    call.__name__ = call.__qualname__ = name
    call.__doc__ = _doc(kind, summary)
    call.__signature__ = _signature(kind, _trace_parameters(traced) + options, returns)  # type: ignore[attr-defined]
    return call


collective: Callable[..., CollectiveResult] = _entry(
    CollectiveRequest, run_collective, "collective", "Simulate one collective on every group of a logical axis.",
    CollectiveResult)
gemm: Callable[..., GemmResult] = _entry(
    GemmRequest, run_gemm, "gemm", "Simulate one distributed GeMM (optionally verified, optionally traced).",
    GemmResult, traced="trace")
step: Callable[..., StepResult] = _entry(
    StepRequest, run_step, "step", "Simulate one training step (optionally traced).", StepResult, traced="trace")
tune: Callable[..., TuneResult] = _entry(
    TuneRequest, run_tune, "tune", "Search mesh shape, per-layer dataflow, transposition and slice count "
    "(optionally tracing the best choice, trace_best=FILE; jobs=N worker processes simulate, at most one per CPU, "
    "with the same result).", TuneResult, traced="trace_best", options=(_JOBS,))


def model(name_or_path: str | Path) -> TransformerModel:
    """The dimensions of a transformer model, as ``step`` and ``tune`` see it.

    ``name_or_path`` is a packaged model's name (``tpusim list models``) or the path of a model YAML file
    (docs/extending.md#a-model). The result is frozen; its fields are ``name``, ``description``,
    ``layers``, ``hidden`` (d_model), ``heads``, ``head_dim``, ``kv_heads``, ``ffn`` (the feed-forward width),
    ``mlp``, ``block``, ``tied_embeddings``, ``sequence`` (tokens per sequence), ``vocabulary`` and the sliding
    window, with the counts derived from them (``params_per_layer``, ``total_params``, ...;
    docs/workloads.md#model-files). An unknown name or a malformed file raises ``UserError``.
    """
    if not isinstance(name_or_path, str | Path):
        raise UserError(f"model {name_or_path!r} must be a model name or the path of a model YAML file")
    return load_model(str(name_or_path))
