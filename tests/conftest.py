"""Shared fixtures: real daemons (tests/harness.py); and Hypothesis made
deterministic: every property test draws the same examples on every run
(derandomize), and no example database carries failures from one run into
the next, so a run's outcome depends on the code alone.

Bytecode: when the environment sets PYTHONDONTWRITEBYTECODE, no process
writes the project's compiled modules, so every process the suite starts
(each daemon, CLI, chaos or MM2 process, each worker) compiles the project's
sources again: about half a second of CPU per daemon start, some hundreds of
times a run. The suite writes them once, into __pycache__ (ignored by git;
Python checks each against its source)."""

import os
import sys

from hypothesis import settings

from linkd.core.fetch_sessions import FollowerFetchSession, SourceFetchSession
from linkd.core.link_rounds import BuiltFetches
from linkd.core.links import LinkTable

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the processes the tests start
sys.dont_write_bytecode = False  # this process's own imports from here on

pytest_plugins = ["tests.harness"]

settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")

# Every link state a lag verdict answers in this process (the core tests, every
# simulator run) is checked against a scan of every partition, and so is every
# round's sorting of a fetch session's partitions on the source, every
# follower's set of fetches kept from its last request, and every follower
# session's quiet partitions taken by difference (the follower's round takes
# its quiet rows by difference under `check_lag_verdicts`).
LinkTable.check_lag_verdicts = True
SourceFetchSession.check_against_scan = True
BuiltFetches.check_against_scan = True
FollowerFetchSession.check_against_scan = True


def pytest_xdist_make_scheduler(config, log):  # type: ignore[no-untyped-def]
    """`--dist loadscope` without xdist 3.8's hang after a worker crash
    (tests/xdist_scope.py)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from tests.xdist_scope import make_scheduler

    return make_scheduler(config, log)

