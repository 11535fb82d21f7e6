"""Every result a runner returns holds finite numbers, and non-negative times, byte counts and ratios.

Inputs that are each valid can still overflow a float together: a link slowed 1e308 times, a scale factor of
1e-300 on the peak FLOP/s. Such a run would print ``NaN`` or ``Infinity``, which is not JSON, or never end (a NaN
time never equals itself). ``finite_result`` checks a runner's result at the boundary where every entry point
(command line, Python API, experiment points) receives it, and turns a bad number into one user error that names
the inputs that can cause it (docs/limits.md#finite-results).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from tpusim.config.requests import CollectiveRequest, GemmRequest, Request, StepRequest, TuneRequest, _OnMesh
from tpusim.engine.result import bad_number
from tpusim.errors import NonFiniteError

__all__ = ["finite_result", "suspects"]

P = ParamSpec("P")
R = TypeVar("R")
Q = TypeVar("Q", bound=Request)

def suspects(request: Request) -> list[str]:
    """The request's inputs that can make times overflow, as the caller wrote them: scale factors other than 1,
    slow chips and links, and the sizes of the work."""
    found = [f"scale.{name} {value!r}" for name, value in request.scale.factors().items()]
    if isinstance(request, _OnMesh):
        found += [f"slow-chip {spec}" for spec in request.slow_chips]
        found += [f"slow-link {spec}" for spec in request.slow_links]
    if isinstance(request, CollectiveRequest):
        found.append(f"bytes {request.bytes}")
    if isinstance(request, GemmRequest):
        found.append(f"m/n/k {request.m}/{request.n}/{request.k}")
    if isinstance(request, StepRequest | TuneRequest):
        found.append(f"model {request.model if isinstance(request.model, str) else request.model.name}")
    hardware = request.hardware if isinstance(request.hardware, str) else request.hardware.name
    return [*found, f"hardware {hardware}"]


def _error(what: str, request: Request) -> NonFiniteError:
    return NonFiniteError(f"{what}: an input makes the times overflow a float; look at {', '.join(suspects(request))}; "
                          "valid: factors and sizes whose times stay finite (docs/limits.md#finite-results)")


def finite_result(runner: Callable[Concatenate[Q, P], R]) -> Callable[Concatenate[Q, P], R]:
    """``runner`` whose result is checked to be finite (and whose overflowing simulation is reported) before it is
    returned."""

    def checked(request: Q, /, *args: P.args, **kwargs: P.kwargs) -> R:
        import numpy as np  # loaded by every runner anyway; imported here to keep this module's import light

        try:
            # an overflow is reported below as one error line, so numpy's warnings about it would only repeat it
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                result = runner(request, *args, **kwargs)
        except NonFiniteError as error:
            raise _error(error.message, request) from None
        to_dict = getattr(result, "to_dict", None)
        bad = bad_number(to_dict()) if callable(to_dict) else None
        if bad is not None:
            path, value = bad
            raise _error(f"the result's {path} came out {value!r}", request)
        return result

    functools.update_wrapper(checked, runner)  # its name and docstring, for help() and tracebacks
    return checked
