"""Shared fixtures: real daemons (tests/harness.py); and Hypothesis made
deterministic: every property test draws the same examples on every run
(derandomize), and no example database carries failures from one run into
the next, so a run's outcome depends on the code alone."""

from hypothesis import settings

pytest_plugins = ["tests.harness"]

settings.register_profile("deterministic", derandomize=True, database=None)
settings.load_profile("deterministic")
