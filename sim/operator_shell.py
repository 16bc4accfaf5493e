"""The simulator's shell for the core's procedures (linkd/core/procedures.py).

A procedure is a generator of requests (linkd/core/requests.py); here every
request is answered on virtual time:

- `Execute`: the cluster carries the effects out (`SimCluster.execute`, on
  its I/O device); the procedure resumes once the appends are durable.
- `Call`: the cluster at the address serves the request at once with the
  core's `procedures.serve` (an operator's call is not on the data path), if
  it is up and both directions between the two clusters are open; otherwise
  the answer is LINK_UNREACHABLE, as a failed gRPC call.
- `Tell`: the same, its answer dropped.
- `Sleep`: resumes after that many virtual milliseconds; `Now`: the clock.
- `Checkpoint`: a durable procedure's step ended (journalled); the world
  may crash the cluster there (a scenario's `crash_at`, the operator
  search's mid-procedure crashes), which ends the procedure with its process.
- `LinkChanged` / `LinkDeleted`: the world starts, wakes or stops the link's
  driver (`Links`); `WakeWaiters`: the cluster's long polls; `Note`: a trace
  line. A link's lanes (`sim.link_driver`) answer their own requests first
  (`Pump`) and leave these to the host.

A procedure ends by calling `then(result, None)`, or `then(None, refusal)`
when it raised ClusterError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any, Protocol

from linkd.core import cluster as core
from linkd.core import procedures
from linkd.core.errors import ClusterError
from linkd.core.link_calls import LaneRequest
from linkd.core.requests import (
    Call,
    Checkpoint,
    Execute,
    Handshake,
    LinkChanged,
    LinkDeleted,
    Note,
    NotStored,
    Now,
    RemoteAnswer,
    RemoteRequest,
    Reply,
    Sleep,
    Tell,
    WakeWaiters,
    unreachable,
)
from sim.cluster_node import SimCluster
from sim.events import EventQueue

# What the world lends the shell: where an address leads, whether two
# clusters can talk, and the links' drivers.


class Links(Protocol):
    def cluster_at(self, address: str) -> SimCluster | None: ...
    def can_talk(self, a: str, b: str) -> bool: ...
    def link_changed(self, cluster: SimCluster, name: str) -> None: ...
    def link_deleted(self, cluster: SimCluster, name: str) -> None: ...
    def logical_bytes(self, effect: core.AppendBatch) -> int: ...
    def host(self, cluster: SimCluster) -> SimHost: ...
    def checkpoint(self, cluster: SimCluster, request: Checkpoint) -> None: ...


Done = Callable[[Any, ClusterError | None], None]
Sized = Callable[[core.AppendBatch], int]


class _Leave:
    """A pump's answer: the host answers this request itself."""


class _Later:
    """A pump's answer: the pump resumes the procedure itself, later."""


LEAVE, LATER = _Leave(), _Later()
# A link's lanes answer some requests themselves (sim/link_driver.py):
# (request, how to resume the procedure) -> the answer, LEAVE or LATER.
Pump = Callable[[LaneRequest, Callable[[object], None]], object]


def address_of(cluster_id: str) -> str:
    """The address a simulated cluster is reached at (as a bootstrap)."""
    return f"{cluster_id}:9092"


class SimHost:
    """Answers a procedure's requests on one simulated cluster."""

    def __init__(self, cluster: SimCluster, queue: EventQueue, links: Links) -> None:
        self.cluster = cluster
        self.queue = queue
        self.links = links

    def drive(
        self,
        procedure: Generator[LaneRequest, object, object],
        then: Done,
        sized: dict[str, Sized] | None = None,
        pump: Pump | None = None,
    ) -> None:
        """Runs the procedure on virtual time; `sized` maps an Execute's
        traffic class to the logical size of its appends (default: the
        world's); `pump` answers the requests of a link's lanes first."""
        sizes = sized or {}
        incarnation = self.cluster.incarnation

        def step(answer: object) -> None:
            if incarnation != self.cluster.incarnation:
                procedure.close()  # its process died, and its work with it
                return
            while True:
                try:
                    request = procedure.send(answer)
                except StopIteration as stop:
                    then(stop.value, None)
                    return
                except ClusterError as exc:
                    then(None, exc)
                    return
                if pump is not None:
                    answer = pump(request, step)
                    if answer is LATER:
                        return
                    if answer is not LEAVE:
                        continue
                if isinstance(request, Execute) and request.refusable:
                    size = sizes.get(request.traffic, self.links.logical_bytes)
                    refused = self.cluster.execute_refusable(
                        list(request.effects),
                        _traffic_class(request.traffic),
                        size,
                        lambda: step(self.queue.now_ms),
                    )
                    if refused is None:
                        return
                    answer = NotStored(self.queue.now_ms, refused)
                    continue
                if isinstance(request, Execute):
                    traffic = request.traffic
                    size = sizes.get(traffic, self.links.logical_bytes)
                    self.cluster.execute(
                        list(request.effects),
                        _traffic_class(traffic),
                        size,
                        lambda: step(self.queue.now_ms),
                    )
                    return
                if isinstance(request, Sleep):
                    self.queue.after(
                        request.ms, f"procedure {self.cluster.cluster_id} sleep",
                        lambda: step(self.queue.now_ms),
                    )
                    return
                answer = self._answer(request)
                if incarnation != self.cluster.incarnation:
                    procedure.close()  # a checkpoint's hook crashed the cluster
                    return

        step(None)

    def _answer(self, request: LaneRequest) -> object:
        if isinstance(request, Call):
            return self.call(request.address, request.request, request.what)
        if isinstance(request, Tell):
            self.call(request.address, request.request, request.what)
            return None
        if isinstance(request, Now):
            return self.queue.now_ms
        if isinstance(request, LinkChanged):
            self.links.link_changed(self.cluster, request.link)
            return None
        if isinstance(request, LinkDeleted):
            self.links.link_deleted(self.cluster, request.link)
            return None
        if isinstance(request, WakeWaiters):
            self.cluster.notify_data(request.partitions)
            return None
        if isinstance(request, Checkpoint):
            self.links.checkpoint(self.cluster, request)
            return None
        if not isinstance(request, Note):
            raise TypeError(f"{self.cluster.cluster_id}: no answer for {request!r} here")
        self.queue.note(f"{self.cluster.cluster_id} {request.level}: {request.message}")
        return None

    def call(self, address: str, request: RemoteRequest, what: str) -> Reply:
        """An operator's call to another cluster, served at once there."""
        now = self.queue.now_ms
        remote = self.links.cluster_at(address)
        if remote is None or not remote.up:
            return Reply(None, unreachable(what, address, "no answer"), now)
        if not self.links.can_talk(self.cluster.cluster_id, remote.cluster_id):
            return Reply(None, unreachable(what, address, "no route"), now)
        if isinstance(request, Handshake) and request.create:
            # The creating session hands the remote the new link's key
            # (masked, `link_auth`); operator calls carry no session here: the
            # simulator checks sessions on the link's own calls.
            request = dataclasses.replace(request, link_key=request.config.value("link_key"))
        try:
            return Reply(self.links.host(remote).serve(request), None, now)
        except ClusterError as exc:
            return Reply(None, exc, now)

    def serve(self, request: RemoteRequest) -> RemoteAnswer:
        """A request from the other cluster of a link, served here by the
        core (`procedures.serve`): its effects carried out, runners started
        or stopped. Raises the refusal."""
        served = procedures.serve(self.cluster.state, request, self.queue.now_ms)
        if served.link_deleted:
            self.links.link_deleted(self.cluster, served.link_deleted)
        if served.effects:
            self.cluster.execute(served.effects, "metadata", self.links.logical_bytes)
        for note in served.notes:
            self.queue.note(f"{self.cluster.cluster_id} info: {note}")
        if served.link_changed:
            self.links.link_changed(self.cluster, served.link_changed)
        return served.answer


def _traffic_class(traffic: str) -> str:
    """The I/O device's traffic class for an Execute's traffic."""
    classes = {"replica": "replica_write", "offsets": "offsets", "retention": "retention"}
    return classes.get(traffic, "metadata")
