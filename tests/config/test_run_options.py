"""The models of how a request is run: each wrong value is one line naming it, the same from every caller."""

from __future__ import annotations

from typing import Any

import pytest

from tpusim.config.options import RunOptions, WorkerOptions
from tpusim.errors import UserError


@pytest.mark.parametrize(("given", "message"), [
    ({"jobs": 0}, "--jobs 0 must be an integer >= 1"),
    ({"jobs": True}, "jobs True must be an integer >= 1"),
    ({"jobs": 2.0}, "jobs 2.0 must be an integer >= 1"),
    ({"timeout": 0}, "--timeout 0 must be a finite number of seconds > 0"),
    ({"timeout": 1e9}, "--timeout 1000000000.0 is too long; valid: seconds > 0 and <= 1e+06"),
    ({"connect_timeout": float("nan")}, "--connect-timeout nan must be a finite number of seconds > 0"),
    ({"resume": "no"}, "resume 'no' must be True or False"),
    ({"yes": 1}, "yes 1 must be True or False"),
    ({"scheduler": 3}, "scheduler 3 must be an address such as 'tcp://host:8786' or None"),
    ({"executor": "x"}, "--executor 'x' is unknown; valid: local, dask"),
    ({"scheduler": "tcp://a:1"}, "--scheduler 'tcp://a:1' needs --executor dask (the local executor runs here)"),
    ({"executor": "dask", "timeout": 3}, "--timeout 3 needs the local executor: a Dask task cannot be stopped once "
                                         "it runs"),
    ({"jobs": 0, "executor": "x"}, "--jobs 0 must be an integer >= 1"),  # checked in order, the first one said
])
def test_a_wrong_run_option_is_one_line(given: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as caught:
        RunOptions.model_validate(given)
    assert caught.value.message == message
    assert caught.value.exit_code == 2


def test_run_options_keep_the_values_given() -> None:
    options = RunOptions.model_validate({"jobs": 3, "timeout": 5, "executor": "dask", "scheduler": "tcp://h:1"}
                                        | {"timeout": None})
    assert (options.jobs, options.timeout, options.executor, options.scheduler) == (3, None, "dask", "tcp://h:1")
    assert RunOptions().connect_timeout == 10.0


@pytest.mark.parametrize(("jobs", "message"), [(0, "jobs 0 must be an integer >= 1"),
                                               ("2", "jobs '2' must be an integer >= 1")])
def test_a_search_takes_a_worker_count(jobs: Any, message: str) -> None:
    with pytest.raises(UserError, match=f"^{message}$"):
        WorkerOptions.model_validate({"jobs": jobs})
    assert WorkerOptions.model_validate({"jobs": 4}).jobs == 4
