"""The daemon's authorization gate: the core's decision, plus what the shell keeps.

Both shells (the Kafka listener and the gRPC services) ask the node's `Gate`
before they call anything that reads or changes the cluster; the decision is
`linkd/core/authorizer.py`'s, over the cluster's stored ACL bindings.

Rules:
- `--authorizer none` (the default): everything is allowed, as Kafka without
  an authorizer; authorized-operations fields list every operation.
- `--authorizer acl`: `super.users` may do everything; anyone else needs an
  applying ALLOW binding and no applying DENY binding.
- Each refusal is logged once, at info level, per (principal, client address,
  resource, operation), in a bounded set (the oldest entry is forgotten past
  MAX_LOGGED_REFUSALS, so a client cannot make the daemon hold more), and
  counted per error kind (`refusals`, for metrics).
- Filtering (a Metadata request for every topic, ListGroups, list calls over
  gRPC) leaves out what the principal may not DESCRIBE silently, as Kafka
  does: neither logged nor counted.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from linkd.core.acls import CLUSTER_RESOURCE_NAME, AclOperation, AclStore, ResourceType
from linkd.core.authorizer import (
    OPERATIONS,
    AuthorizerMode,
    Refusal,
    authorize,
    authorize_any,
    authorized_operations,
)
from linkd.core.errors import ClusterError, ErrorCode

log = logging.getLogger("linkd.authz")

MAX_LOGGED_REFUSALS = 4096


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: the principal ("Type:name") and the client's address."""

    principal: str
    host: str

    @classmethod
    def of(cls, principal: str, client_address: str) -> Caller:
        """`client_address` as the shells know it ("/127.0.0.1", "ipv4:1.2.3.4:5")."""
        return cls(principal, client_host(client_address))


def client_host(address: str) -> str:
    """The host part of a client address, as ACL host fields name it."""
    host = address.lstrip("/")
    for scheme in ("ipv4:", "ipv6:"):
        if host.startswith(scheme):
            host = host[len(scheme) :].rsplit(":", 1)[0].strip("[]")
    return host


@dataclass
class Gate:
    """The authorizer as the daemon runs it. `acls` reads the current bindings."""

    acls: Callable[[], AclStore]
    mode: AuthorizerMode = AuthorizerMode.NONE
    super_users: frozenset[str] = frozenset()
    refusals: Counter[ErrorCode] = field(default_factory=Counter)
    _logged: OrderedDict[Refusal, None] = field(default_factory=OrderedDict)

    @property
    def enabled(self) -> bool:
        return self.mode is AuthorizerMode.ACL

    def allowed(
        self, who: Caller, resource_type: int, name: str, operation: int, *, quiet: bool = False
    ) -> bool:
        """The decision; a refusal is logged and counted unless `quiet` (filtering)."""
        if not self.enabled:
            return True
        if authorize(
            self.acls(), who.principal, who.host, resource_type, name, operation, self.super_users
        ):
            return True
        if not quiet:
            self._refused(Refusal(who.principal, who.host, resource_type, name, operation))
        return False

    def refusal(
        self, who: Caller, resource_type: int, name: str, operation: int
    ) -> ClusterError | None:
        """None when allowed; otherwise the ClusterError to answer."""
        if self.allowed(who, resource_type, name, operation):
            return None
        return Refusal(who.principal, who.host, resource_type, name, operation).error()

    def check(self, who: Caller, resource_type: int, name: str, operation: int) -> None:
        """Raises the refusal's ClusterError unless allowed."""
        error = self.refusal(who, resource_type, name, operation)
        if error is not None:
            raise error

    def check_cluster(self, who: Caller, operation: int) -> None:
        self.check(who, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, operation)

    def cluster_refusal(self, who: Caller, operation: int) -> ClusterError | None:
        return self.refusal(who, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME, operation)

    def allowed_any(self, who: Caller, resource_type: int, operation: int) -> bool:
        """Kafka's authorizeByResourceType (not logged: a fallback check)."""
        if not self.enabled:
            return True
        return authorize_any(
            self.acls(), who.principal, who.host, resource_type, operation, self.super_users
        )

    def operations(self, who: Caller, resource_type: int, name: str) -> tuple[int, ...]:
        """The operations the caller may do on the resource (every one when off)."""
        if not self.enabled:
            return OPERATIONS.get(resource_type, ())
        return authorized_operations(
            self.acls(), who.principal, who.host, resource_type, name, self.super_users
        )

    def _refused(self, refusal: Refusal) -> None:
        self.refusals[refusal.code] += 1
        if refusal in self._logged:
            self._logged.move_to_end(refusal)
            return
        self._logged[refusal] = None
        if len(self._logged) > MAX_LOGGED_REFUSALS:
            self._logged.popitem(last=False)
        log.info(
            "authorization refused",
            extra={
                "principal": refusal.principal,
                "client": refusal.host,
                "resource": refusal.resource(),
                "operation": AclOperation(refusal.operation).name,
                "error": refusal.code.name,
            },
        )
