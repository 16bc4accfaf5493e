"""Shared fixtures: real daemons (tests/harness.py); and Hypothesis made
deterministic: every property test draws the same examples on every run
(derandomize), and no example database carries failures from one run into
the next, so a run's outcome depends on the code alone."""

from hypothesis import settings

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
