"""The operator's verbs on links, run as the core's procedures on this daemon.

Every verb is a procedure of `linkd.core.procedures` (create, attach,
detach, delete, set-mode, failover, set-reserved, recover, reverse): the
decisions, the order of the steps and what is asked of the other cluster
are the core's, the same the simulator runs. `Operations` only starts each
procedure with this daemon's time and identifiers and drives it
(`linkd.procedure_shell.DaemonHost`: gRPC to the remote, files, asyncio).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping

from linkd.core import procedures
from linkd.core.link_admin import Failover, Reservation
from linkd.core.link_auth import KEY_BYTES
from linkd.core.links import LinkConfig
from linkd.core.namespaces import ResourceType
from linkd.core.recovery import RecoveryPlan
from linkd.node import ClusterNode
from linkd.replication import LinkManager

# Re-exported: the reversal's report types and bounds are the core's.
ReverseReport = procedures.ReverseReport
Step = procedures.Step
AdminResult = procedures.AdminResult
REVERSE_TIMEOUT_MS_DEFAULT = procedures.REVERSE_TIMEOUT_MS_DEFAULT


class Operations:
    """The operator's link verbs on one daemon."""

    def __init__(self, node: ClusterNode, links: LinkManager) -> None:
        self.node = node
        self.links = links

    @property
    def _now(self) -> int:
        return self.node.clock()

    async def create_link(
        self,
        name: str,
        remote_bootstrap: str,
        credentials: str,
        direction: str,
        local_bootstrap: str,
        policies: dict[str, str] | None = None,
    ) -> LinkConfig:
        self.node.check_ready()
        box = self.links.security.box
        config: LinkConfig = await self.links.host.drive(
            procedures.create_link(
                self.node.state,
                name,
                str(uuid.uuid4()),
                remote_bootstrap,
                box.seal(credentials),
                direction,
                local_bootstrap,
                self._now,
                box.seal_bytes(secrets.token_bytes(KEY_BYTES)),
                policies,
            )
        )
        return config

    async def alter_link(
        self,
        name: str,
        remote_bootstrap: str | None,
        credentials: str | None,
        local_bootstrap: str | None,
        policies: Mapping[str, str] | None = None,
    ) -> LinkConfig:
        """`policies`: the shared policies to change, by stored field
        (`links.POLICIES`: gap_policy, fetch_bound, failover_truncation,
        failback_reconciliation)."""
        self.node.check_ready()
        changes: dict[str, str] = dict(policies or {})
        if remote_bootstrap is not None:
            changes["remote_bootstrap"] = remote_bootstrap
        if credentials is not None:
            changes["credentials"] = self.links.security.box.seal(credentials)
        if local_bootstrap is not None:
            changes["local_bootstrap"] = local_bootstrap
        config: LinkConfig = await self.links.host.drive(
            procedures.alter_link(self.node.state, name, changes, self._now)
        )
        return config

    async def resume_partition(self, name: str, topic: str, partition: int) -> LinkConfig:
        self.node.check_ready()
        config: LinkConfig = await self.links.host.drive(
            procedures.resume_partition(self.node.state, name, topic, partition)
        )
        return config

    async def attach(
        self, name: str, resource_type: str, local_prefix: str, remote_prefix: str, leader: str
    ) -> AdminResult:
        self.node.check_ready()
        result: AdminResult = await self.links.host.drive(
            procedures.attach(
                self.node.state, name, resource_type, local_prefix, remote_prefix, leader,
                self._now,
            )
        )
        return result

    async def detach(self, name: str, resource_type: str, local_prefix: str) -> AdminResult:
        self.node.check_ready()
        result: AdminResult = await self.links.host.drive(
            procedures.detach(self.node.state, name, resource_type, local_prefix, self._now)
        )
        return result

    async def delete_link(self, name: str) -> AdminResult:
        self.node.check_ready()
        result: AdminResult = await self.links.host.drive(
            procedures.delete_link(self.node.state, name, self._now)
        )
        return result

    async def set_mode(self, name: str, mode: str) -> AdminResult:
        self.node.check_ready()
        result: AdminResult = await self.links.host.drive(
            procedures.set_mode(self.node.state, name, mode, self._now)
        )
        return result

    async def failover(self, name: str, force: bool) -> Failover:
        self.node.check_ready()
        result: Failover = await self.links.host.drive(
            procedures.failover(self.node.state, name, force, self._now)
        )
        return result

    async def set_reserved(
        self, resource_type: ResourceType | int, prefix: str, reserved: bool
    ) -> Reservation:
        self.node.check_ready()
        result: Reservation = await self.links.host.drive(
            procedures.set_reserved(self.node.state, resource_type, prefix, reserved, self._now)
        )
        return result

    async def recover(
        self, link_name: str, requested: list[tuple[str, str, str | None]], confirm: bool
    ) -> RecoveryPlan:
        self.node.check_ready()
        plan: RecoveryPlan = await self.links.host.drive(
            procedures.recover(self.node.state, link_name, requested, confirm, self._now)
        )
        return plan

    async def reverse(self, link_name: str, timeout_ms: int) -> procedures.ReverseReport:
        self.node.check_ready()
        report: procedures.ReverseReport = await self.links.host.drive(
            procedures.reverse(self.node.state, link_name, timeout_ms, self._now)
        )
        return report
