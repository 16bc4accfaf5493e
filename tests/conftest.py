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

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the processes the tests start
sys.dont_write_bytecode = False  # this process's own imports from here on

pytest_plugins = ["tests.harness"]

settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")


def pytest_xdist_make_scheduler(config, log):  # type: ignore[no-untyped-def]
    """`--dist loadscope` without xdist 3.8's hang after a worker crash
    (tests/xdist_scope.py)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from tests.xdist_scope import make_scheduler

    return make_scheduler(config, log)


# The slowest modules (seconds of one worker, as measured on a full run),
# started first: each worker takes the next module as it finishes one, so
# with the long ones ahead the workers end about together instead of one
# running a long module while the others wait.
SLOWEST_FIRST = (
    "test_operator_stories_e2e", "test_sim_report", "test_readme_sections",
    "test_sim_operator_sweep_finds", "test_chaos_runs", "test_sim_glossary",
    "test_links_e2e", "test_operator_stories_failover_e2e", "test_mirror_linkd",
    "test_kafka_security", "test_client_log", "test_sim_pinned_digests",
    "test_sync_links_e2e", "test_chaos_operators", "test_fd_limits",
    "test_reverse_crash_e2e", "test_kafka_wire", "test_sim_sweep",
    "test_groups_failover_e2e", "test_mirror_links_daemon",
)  # fmt: skip


def pytest_collection_modifyitems(items):  # type: ignore[no-untyped-def]
    """The slowest modules first (`SLOWEST_FIRST`), the rest in collection
    order; a module's tests keep their order."""
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}

    def key(item):  # type: ignore[no-untyped-def]
        module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
        return rank.get(module, len(SLOWEST_FIRST))

    items.sort(key=key)
