"""The test harness gives each xdist worker its listeners' ports from a range
of its own, below the kernel's ephemeral range, never the same port twice
in one process, and skips a port something else holds."""

from __future__ import annotations

import importlib
import socket

import pytest

from tests import harness


def test_each_worker_has_a_range_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    ranges = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        ranges.append(set(harness._worker_ports()))
    assert not ranges[0] & ranges[1] and not ranges[1] & ranges[2]
    assert max(max(r) for r in ranges) < 32_768  # below the ephemeral ports


def test_ports_are_in_the_range_never_twice_and_free(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    monkeypatch.setattr(harness, "_PORTS_GIVEN", set())
    first = harness.free_port()
    assert first in harness._worker_ports()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        nxt = first + 1 if first + 1 in harness._worker_ports() else first - 1
        held.bind(("127.0.0.1", nxt))  # something else holds the next one
        given = [harness.free_port() for _ in range(5)]
    assert first not in given and nxt not in given
    assert len(set(given)) == 5


def test_the_harness_is_one_module_under_both_names() -> None:
    """Test modules import it as `harness` and as `tests.harness`: one
    record of the ports given out, not two."""
    assert importlib.import_module("harness") is harness
