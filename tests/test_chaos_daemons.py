"""chaos/daemons.py: a daemon whose free port was taken before it bound it
starts again on new ports at setup (a real linkd process)."""

from __future__ import annotations

import socket
from pathlib import Path

from chaos.daemons import Daemon


def test_a_daemon_whose_port_was_taken_meanwhile_starts_on_new_ports(tmp_path: Path) -> None:
    d = Daemon("A", tmp_path)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        d.port = taken.getsockname()[1]  # another process got there first
        d.start()
        d.wait_ready_or_rebind()
        assert d.running and d.port != taken.getsockname()[1]
        assert "already in use" in d.log_path.read_text().lower()
    finally:
        d.stop()
        taken.close()
