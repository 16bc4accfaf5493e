"""The suite's xdist scheduler: pytest-xdist's `--dist loadscope` (a module's
tests on one worker, so its module fixtures start once), with the
worker-crash handling that xdist 3.8 gets wrong.

When a worker dies (a segfault in a native client library, or pytest-timeout
ending a hung test), xdist 3.8's LoadScopeScheduling puts the dead worker's
whole workload back on the queue, the modules it had finished included. Those
come back as empty work units that never report completion, and near the end
of a run every worker waits for a test while the controller waits for a
report: the run hangs until CI's time limit (pytest-xdist issues 1323, 1327,
1378). Here a crash requeues only the modules with tests left, the test the
worker died on counts as done (xdist has reported it as failed; running it
again would take the replacement down too), and a worker given the last unit
is told to stop after it, since a worker runs its last test only once it
knows no other follows.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController


class CrashSafeLoadScope(LoadScopeScheduling):  # type: ignore[misc]
    def remove_node(self, node: WorkerController) -> str | None:
        workload: dict[str, dict[str, bool]] = self.assigned_work.pop(node)
        pending = [
            nodeid for unit in workload.values() for nodeid, done in unit.items() if not done
        ]
        if not pending:
            return None
        crashitem = pending[0]
        for scope, unit in workload.items():
            if crashitem in unit:
                unit[crashitem] = True
            if not all(unit.values()):
                self.workqueue[scope] = unit
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def _reschedule(self, node: WorkerController) -> None:
        super()._reschedule(node)
        if not self.workqueue and not node.shutting_down and node in self.assigned_work:
            node.shutdown()


def make_scheduler(config: Any, log: Any) -> CrashSafeLoadScope:
    return CrashSafeLoadScope(config, log)
