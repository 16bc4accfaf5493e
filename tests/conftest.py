"""Shared fixtures: real daemons (tests/harness.py)."""

pytest_plugins = ["tests.harness"]
