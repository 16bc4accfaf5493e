"""TEST ONLY: crash hooks the tests of durable procedures use to stop a
daemon, or the other cluster, between two steps (linkd/core/plans.py).

Nothing but those tests may set these environment variables:

- `LINKD_TEST_EXIT_AT=<point>`: this daemon exits at once (exit code 137, as
  after kill -9, with nothing flushed beyond what is already durable) when
  it reaches `<point>`: a procedure's checkpoint (`requests.Checkpoint`, e.g.
  "reverse:detach-mappings#1"; "failover:verify-link-state",
  "failover:make-writable", "failover:tell-remote"; "recover:plan-recovery",
  "recover:reserve-and-cut", "recover:follow-remote#<i>" after the i-th
  mapping, "recover:follow-remote"), or "serve:promote" once it has made the
  namespaces a remote's reversal promotes writable, before it answers.
- `LINKD_TEST_KILL_AT=<point>=<pid>`: at `<point>` this daemon sends SIGKILL
  to process `<pid>` (the other cluster's daemon) and goes on, so that the
  procedure's next call meets a remote that died between two steps. It
  fires once: the variable is then removed from this process's environment,
  so that a re-run reaching the same point never signals a PID the killed
  daemon no longer holds.

`SERVE_POINTS` lists, per procedure, the points a remote reaches while it
serves that procedure (the crash matrix, `ccr-chaos crash-matrix`, crashes
each of them besides the procedure's own checkpoints).
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("linkd.test_hooks")

EXIT_AT_ENV = "LINKD_TEST_EXIT_AT"
KILL_AT_ENV = "LINKD_TEST_KILL_AT"
EXIT_CODE = 137
# Reached by the remote while it serves a procedure's call.
SERVE_PROMOTE = "serve:promote"
SERVE_POINTS: dict[str, tuple[str, ...]] = {"reverse": (SERVE_PROMOTE,)}


def reached(point: str) -> None:
    """`point` was reached (its outcome durable): fire the hooks set for it."""
    kill = os.environ.get(KILL_AT_ENV, "")
    if kill:
        where, _, pid = kill.rpartition("=")
        if where == point and pid.isdigit():
            os.environ.pop(KILL_AT_ENV, None)  # once: the PID is the dead daemon's
            log.critical("test hook %s: killing process %s at %s", KILL_AT_ENV, pid, point)
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
    if os.environ.get(EXIT_AT_ENV) == point:
        log.critical("test hook %s: exiting at %s", EXIT_AT_ENV, point)
        logging.shutdown()
        os._exit(EXIT_CODE)


__all__ = [
    "EXIT_AT_ENV", "EXIT_CODE", "KILL_AT_ENV", "SERVE_POINTS", "SERVE_PROMOTE", "reached",
]
