"""The shell of replication links: dialing, handshakes, fetch loops.

Every decision (what a link's configuration is after a merge, which state it
is in, whether a follower diverged, what bytes a follower appends) is made by
`linkd.core.links` and `linkd.core.replication`; this module moves bytes and
messages between clusters and carries out the effects on the local node.

- `LinkManager` owns one `LinkRunner` task per link this cluster dials
  (connection direction "local_dials" on this side). A runner repeats, with a
  bounded back-off on failure: handshake (exchange configurations; both sides
  converge field by field), discover the source topics of every namespace this
  side follows (creating follower topics with the source's shape), and one
  long-poll replica fetch for every follower partition, whose batches are
  appended byte for byte.
- `ReplicationService` answers the remote's calls: Handshake, RemoveLink,
  ListSourceTopics, ReplicaFetch (long-poll on new data), FetchGroupOffsets.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import grpc
from grpc import aio

from ccr.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    errors_pb2,
    replication_pb2,
    replication_pb2_grpc,
)
from linkd.core import link_rounds as rounds
from linkd.core import replication as rep
from linkd.core.cluster import ClusterState, Journal
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.links import Field, LinkConfig, Mapping, Version
from linkd.grpc_errors import abort_with_error
from linkd.node import ClusterNode

log = logging.getLogger("linkd.replication")

HANDSHAKE_INTERVAL_S = 2.0
DISCOVERY_INTERVAL_S = 0.5
FETCH_MAX_WAIT_MS = 500
FETCH_MAX_BYTES = 8 * 1024 * 1024
PARTITION_MAX_BYTES = 1024 * 1024
CALL_TIMEOUT_S = 10.0
BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 2.0
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 128 * 1024 * 1024),
    ("grpc.max_send_message_length", 128 * 1024 * 1024),
]


# -- configuration views on the wire ------------------------------------------------


def _version_pb(v: Version) -> replication_pb2.Version:
    return replication_pb2.Version(physical_ms=v[0], logical=v[1], node=v[2])


def _version(v: replication_pb2.Version) -> Version:
    return (v.physical_ms, v.logical, v.node)


def view_of(config: LinkConfig) -> replication_pb2.LinkConfigView:
    return replication_pb2.LinkConfigView(
        name=config.name,
        link_id=config.link_id,
        local_cluster_id=config.local_cluster_id,
        remote_cluster_id=config.remote_cluster_id,
        connection_direction=config.connection_direction,
        fields=[
            replication_pb2.VersionedField(name=k, value=f.value, version=_version_pb(f.version))
            for k, f in sorted(config.fields.items())
        ],
        mappings=[
            replication_pb2.VersionedMapping(
                resource_type=m.resource_type,
                local_prefix=m.local_prefix,
                remote_prefix=m.remote_prefix,
                leader=m.leader,
                attached=m.attached,
                version=_version_pb(m.version),
            )
            for _, m in sorted(config.mappings.items())
        ],
        link_epoch=config.link_epoch,
    )


def config_of(view: replication_pb2.LinkConfigView) -> LinkConfig:
    fields = {f.name: Field(f.value, _version(f.version)) for f in view.fields}
    mappings = {}
    for m in view.mappings:
        mapping = Mapping(
            m.resource_type,
            m.local_prefix,
            m.remote_prefix,
            m.leader,
            m.attached,
            _version(m.version),
        )
        mappings[mapping.key] = mapping
    return LinkConfig(
        view.name,
        view.link_id,
        view.local_cluster_id,
        view.remote_cluster_id,
        view.connection_direction,
        fields,
        mappings,
        view.link_epoch,
    )


def _rpc_error(exc: grpc.RpcError, what: str) -> ClusterError:
    """A remote refusal keeps its code; a transport failure is LINK_UNREACHABLE."""
    trailing: Any = exc.trailing_metadata() if isinstance(exc, aio.AioRpcError) else None
    for key, value in trailing or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            from google.rpc import status_pb2

            status = status_pb2.Status.FromString(value)
            for any_detail in status.details:
                detail = errors_pb2.ErrorDetail()
                if any_detail.Unpack(detail):
                    return ClusterError(
                        ErrorCode(detail.code),
                        detail.resource,
                        f"remote refused {what}: {detail.message}",
                    )
    return ClusterError(
        ErrorCode.LINK_UNREACHABLE,
        what,
        f"{what}: {exc.code().name if hasattr(exc, 'code') else exc}: "
        f"{exc.details() if hasattr(exc, 'details') else ''}",
    )


class LinkManager:
    """Admin operations on links, and one runner per link this side dials."""

    def __init__(self, node: ClusterNode, required_credentials: str = "") -> None:
        self.node = node
        # When set, a remote must present these credentials in every handshake
        # (creating or updating a link); data calls are bound to a link id
        # learned through such a handshake.
        self.required_credentials = required_credentials
        self.runners: dict[str, LinkRunner] = {}
        self._stopping = False
        # Best-effort calls to the remote that nobody waits for.
        self._background: set[asyncio.Task[None]] = set()

    @property
    def state(self) -> ClusterState:
        return self.node.state

    def start(self) -> None:
        self.state.links.start(self.node.clock())
        for name in self.state.links.names():
            self._ensure_runner(name)

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self._background):
            task.cancel()
        for runner in list(self.runners.values()):
            await runner.stop()
        self.runners.clear()

    def _ensure_runner(self, name: str) -> None:
        config = self.state.links.configs.get(name)
        if config is None or self._stopping:
            return
        if config.connection_direction == "local_dials" and name not in self.runners:
            runner = LinkRunner(self, name)
            self.runners[name] = runner
            runner.start()

    async def journal(self, records: list[dict[str, Any]]) -> None:
        if records:
            await self.node._execute([Journal(tuple(records))])

    # -- admin operations -----------------------------------------------------------

    async def create_link(
        self,
        name: str,
        remote_bootstrap: str,
        credentials: str,
        direction: str,
        local_bootstrap: str,
    ) -> LinkConfig:
        self.node._check_ready()
        now = self.node.clock()
        if name in self.state.links.configs:
            raise ClusterError(
                ErrorCode.LINK_EXISTS,
                f"link {name!r}",
                f"link {name!r} already exists on cluster {self.node.cluster_id!r}",
            )
        async with aio.insecure_channel(remote_bootstrap, options=GRPC_OPTIONS) as channel:
            try:
                described = await admin_pb2_grpc.AdminStub(channel).DescribeCluster(
                    admin_pb2.DescribeClusterRequest(), timeout=CALL_TIMEOUT_S
                )
            except grpc.RpcError as exc:
                raise _rpc_error(exc, f"link {name!r}: dialing {remote_bootstrap}") from exc
            config = self.state.links.new_config(
                name,
                str(uuid.uuid4()),
                described.cluster_id,
                remote_bootstrap,
                credentials,
                direction,
                local_bootstrap,
                now,
            )
            try:
                reply = await replication_pb2_grpc.ReplicationStub(channel).Handshake(
                    replication_pb2.HandshakeRequest(config=view_of(config), create=True),
                    timeout=CALL_TIMEOUT_S,
                )
            except grpc.RpcError as exc:
                raise _rpc_error(
                    exc, f"link {name!r}: creating the mirror on {described.cluster_id!r}"
                ) from exc
        records = self.state.links.store(config, now)
        records += rounds.accept_handshake_answer(self.state, name, config_of(reply.config), now)
        await self.journal(records)
        self._ensure_runner(name)
        log.info("link created", extra={"link": name, "remote": described.cluster_id})
        return self.state.links.get(name)

    async def attach(
        self, name: str, resource_type: str, local_prefix: str, remote_prefix: str, leader: str
    ) -> LinkConfig:
        self.node._check_ready()
        mapping = rep.check_attach(
            self.state, name, resource_type, local_prefix, remote_prefix, leader
        )
        return await self._change_mapping(name, mapping)

    async def detach(self, name: str, resource_type: str, local_prefix: str) -> LinkConfig:
        self.node._check_ready()
        from linkd.core.namespaces import ResourceType

        config = self.state.links.get(name)
        kind = ResourceType.parse(resource_type)
        current = config.mappings.get((kind.label, local_prefix))
        if current is None or not current.attached:
            raise ClusterError(
                ErrorCode.UNKNOWN_NAMESPACE,
                f"link {name!r}",
                f"link {name!r}: {kind.label} namespace {local_prefix!r} is not attached to it",
            )
        return await self._change_mapping(name, rep.replace_mapping(current, attached=False))

    async def _change_mapping(self, name: str, mapping: Mapping) -> LinkConfig:
        """Tells the remote first (it may refuse: then nothing changes here);
        an unreachable remote converges later through the handshakes."""
        now = self.node.clock()
        config = self.state.links.get(name)
        candidate = LinkConfig(
            config.name,
            config.link_id,
            config.local_cluster_id,
            config.remote_cluster_id,
            config.connection_direction,
            dict(config.fields),
            dict(config.mappings),
            config.link_epoch,
        )
        versioned = rep.replace_mapping(mapping, attached=mapping.attached)
        from dataclasses import replace

        versioned = replace(versioned, version=self.state.links.hlc.now(now))
        candidate.mappings[versioned.key] = versioned
        candidate.link_epoch += 1
        try:
            await self._handshake(candidate, create=False)
        except ClusterError as exc:
            if exc.code != ErrorCode.LINK_UNREACHABLE:
                raise
            log.warning(
                "remote unreachable; the change converges later",
                extra={"link": name, "error": exc.message},
            )
        records: list[dict[str, Any]] = []
        previous = config.mappings.get(versioned.key)
        if previous is not None and previous.attached and not versioned.attached:
            records += rep.detach_provenance(self.state, config, previous)
        records += self.state.links.store(candidate, now)
        records += rep.reconcile_attachments(self.state, name)
        await self.journal(records)
        runner = self.runners.get(name)
        if runner is not None:
            runner.wake()
        return self.state.links.get(name)

    async def _handshake(self, config: LinkConfig, *, create: bool) -> LinkConfig:
        address = config.value("remote_bootstrap")
        async with aio.insecure_channel(address, options=GRPC_OPTIONS) as channel:
            try:
                reply = await replication_pb2_grpc.ReplicationStub(channel).Handshake(
                    replication_pb2.HandshakeRequest(config=view_of(config), create=create),
                    timeout=CALL_TIMEOUT_S,
                )
            except grpc.RpcError as exc:
                raise _rpc_error(exc, f"link {config.name!r}: handshake with {address}") from exc
        return config_of(reply.config)

    async def delete_link(self, name: str) -> None:
        self.node._check_ready()
        config = self.state.links.get(name)
        runner = self.runners.pop(name, None)
        if runner is not None:
            await runner.stop()
        address = config.value("remote_bootstrap")
        try:
            async with aio.insecure_channel(address, options=GRPC_OPTIONS) as channel:
                await replication_pb2_grpc.ReplicationStub(channel).RemoveLink(
                    replication_pb2.RemoveLinkRequest(link_id=config.link_id),
                    timeout=CALL_TIMEOUT_S,
                )
        except grpc.RpcError as exc:
            log.warning(
                "remote not told of the link deletion",
                extra={"link": name, "error": str(_rpc_error(exc, "remove link"))},
            )
        await self.journal(rep.delete_link(self.state, name))

    async def set_mode(self, name: str, mode: str) -> LinkConfig:
        """ASYNC or SYNC (spec section 4): decided here, then told to the remote
        (best effort: the mode is a versioned field and converges)."""
        self.node._check_ready()
        records, hw_moved = rounds.set_link_mode(self.state, name, mode, self.node.clock())
        if not records:
            return self.state.links.get(name)
        await self.journal(records)
        if hw_moved:
            self.node._notify_data()
        config = self.state.links.get(name)
        try:
            await self._handshake(config, create=False)
        except ClusterError as exc:
            log.warning(
                "mode change not yet known to the remote",
                extra={"link": name, "error": exc.message},
            )
        runner = self.runners.get(name)
        if runner is not None:
            runner.wake()
        log.info("link mode set", extra={"link": name, "mode": config.mode})
        return self.state.links.get(name)

    async def failover(self, name: str, force: bool) -> list[dict[str, Any]]:
        self.node._check_ready()
        records, abandoned = rep.failover(self.state, name, force, self.node.clock())
        await self.journal(records)
        # The promoted topics' high watermarks no longer wait for their source.
        self.node.refresh_high_watermarks()
        # Tell the remote best effort, without making the operator wait: after
        # a disaster it is usually gone, and the detach is versioned and
        # converges through the handshakes anyway.
        config = self.state.links.get(name)
        task = asyncio.create_task(self._tell_failover(config), name=f"failover-{name}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return abandoned

    async def _tell_failover(self, config: LinkConfig) -> None:
        try:
            await self._handshake(config, create=False)
        except ClusterError as exc:
            log.warning(
                "failover not yet known to the remote",
                extra={"link": config.name, "error": exc.message},
            )

    # -- calls from the remote -----------------------------------------------------------

    async def on_handshake(self, view: replication_pb2.LinkConfigView, create: bool) -> LinkConfig:
        theirs = config_of(view)
        records = rounds.accept_handshake(
            self.state, theirs, create, self.node.clock(), self.required_credentials
        )
        await self.journal(records)
        self._ensure_runner(theirs.name)
        runner = self.runners.get(theirs.name)
        if runner is not None and records:
            runner.wake()
        return self.state.links.get(theirs.name)

    async def on_remove(self, link_id: str) -> None:
        try:
            config = self.state.links.by_id(link_id)
        except ClusterError:
            return
        runner = self.runners.pop(config.name, None)
        if runner is not None:
            await runner.stop()
        await self.journal(rep.delete_link(self.state, config.name))


class LinkRunner:
    """The dialing side of one link: handshakes, discovery, replica fetches."""

    def __init__(self, manager: LinkManager, name: str) -> None:
        self.manager = manager
        self.name = name
        self.task: asyncio.Task[None] | None = None
        self._stopping = False
        self._last_handshake = 0.0
        self._last_discovery = 0.0
        # Push mode: the follower's last fetch request, served in the next push.
        self._next_fetch: replication_pb2.ReplicaFetchRequest | None = None
        # Replicated offsets waiting for the follower's data to reach them.
        self._held_offsets: list[rep.GroupOffset] = []
        # Set when the link's mappings change, so an idle runner starts at once.
        self._wake = asyncio.Event()
        # Handshakes and discovery run beside the data path, not in series with
        # it: a SYNC acknowledgement must not wait behind them.
        self._control: asyncio.Task[None] | None = None
        self._control_error: ClusterError | None = None

    def wake(self) -> None:
        """Mappings changed: handshake and discover on the next step, now."""
        self._last_handshake = 0.0
        self._last_discovery = 0.0
        self._wake.set()

    @property
    def node(self) -> ClusterNode:
        return self.manager.node

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name=f"link-{self.name}")

    async def stop(self) -> None:
        self._stopping = True
        if self._control is not None:
            self._control.cancel()
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass

    async def run(self) -> None:
        backoff = BACKOFF_MIN_S
        channel: aio.Channel | None = None
        address: str = ""
        try:
            while not self._stopping:
                config = self.node.state.links.configs.get(self.name)
                if config is None:
                    return
                if channel is None or address != config.value("remote_bootstrap"):
                    if channel is not None:
                        await channel.close(None)
                    address = config.value("remote_bootstrap")
                    channel = aio.insecure_channel(address, options=GRPC_OPTIONS)
                stub = replication_pb2_grpc.ReplicationStub(channel)
                try:
                    await self.step(stub, config)
                    backoff = BACKOFF_MIN_S
                except (ClusterError, grpc.RpcError) as exc:
                    error = exc if isinstance(exc, ClusterError) else _rpc_error(exc, "link")
                    self.node.state.links.on_contact_lost(self.name, self.node.clock())
                    log.debug("link step failed", extra={"link": self.name, "error": error.message})
                    await asyncio.sleep(backoff)
                    backoff = min(BACKOFF_MAX_S, backoff * 2)
        finally:
            if channel is not None:
                await channel.close(None)

    async def step(
        self, stub: replication_pb2_grpc.ReplicationAsyncStub, config: LinkConfig
    ) -> None:
        loop = asyncio.get_running_loop()
        state = self.node.state
        if self._control_error is not None:
            error, self._control_error = self._control_error, None
            raise error
        first = self._last_handshake == 0.0 and self._control is None
        handshake_due = loop.time() - self._last_handshake >= HANDSHAKE_INTERVAL_S
        discovery_due = (
            rep.follower_mappings(config, "topic") or rep.follower_mappings(config, "group")
        ) and loop.time() - self._last_discovery >= DISCOVERY_INTERVAL_S
        if (handshake_due or discovery_due) and (self._control is None or self._control.done()):
            self._control = asyncio.create_task(
                self._control_round(stub, handshake_due, bool(discovery_due)),
                name=f"link-{self.name}-control",
            )
            if first:
                # The very first handshake goes before any data: it may create
                # the link on the remote or refuse our credentials.
                await asyncio.shield(self._control)
                if self._control_error is not None:
                    error, self._control_error = self._control_error, None
                    raise error
            config = state.links.get(self.name)
        if rep.follower_mappings(config, "topic"):
            await self.pull(stub, config)
        elif rep.leader_mappings(config, "topic"):
            await self.push(stub, config)
        else:
            # Nothing to replicate: keep the session alive with handshakes, and
            # start at once when an attach wakes the runner.
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=HANDSHAKE_INTERVAL_S)
            except TimeoutError:
                pass
            self._wake.clear()

    async def _control_round(
        self, stub: replication_pb2_grpc.ReplicationAsyncStub, handshake: bool, discovery: bool
    ) -> None:
        """One handshake and/or one discovery, beside the data path. A failure
        is handed to the data loop (which backs off and reconnects)."""
        try:
            if handshake:
                await self._handshake_once(stub)
            if discovery:
                config = self.node.state.links.configs.get(self.name)
                if config is not None:
                    await self.discover(stub, config)
        except (ClusterError, grpc.RpcError) as exc:
            self._control_error = exc if isinstance(exc, ClusterError) else _rpc_error(exc, "link")
            self.node.state.links.on_contact_lost(self.name, self.node.clock())
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must not kill the runner silently
            log.exception("link control round failed", extra={"link": self.name})

    async def _handshake_once(self, stub: replication_pb2_grpc.ReplicationAsyncStub) -> None:
        loop = asyncio.get_running_loop()
        state = self.node.state
        config = state.links.configs.get(self.name)
        if config is None:
            return
        reply = await stub.Handshake(
            replication_pb2.HandshakeRequest(config=view_of(config)), timeout=CALL_TIMEOUT_S
        )
        records = rounds.accept_handshake_answer(
            state, self.name, config_of(reply.config), self.node.clock()
        )
        await self.manager.journal(records)
        self._last_handshake = loop.time()

    async def discover(
        self, stub: replication_pb2_grpc.ReplicationAsyncStub, config: LinkConfig
    ) -> None:
        """This side follows and dials: the source's topics (created or
        reshaped here), READ ACLs and group offsets."""
        loop = asyncio.get_running_loop()
        namespaces = []
        for mapping in rep.follower_mappings(config, "topic"):
            reply = await stub.ListSourceTopics(
                replication_pb2.ListSourceTopicsRequest(
                    link_id=config.link_id, prefix=mapping.remote_prefix
                ),
                timeout=CALL_TIMEOUT_S,
            )
            namespaces.append(_namespace_of(mapping.remote_prefix, reply.topics, reply.read_acls))
        await apply_topics(self.node, config, namespaces)
        offsets: list[rep.GroupOffset] = []
        for group_mapping in rep.follower_mappings(config, "group"):
            reply_offsets = await stub.FetchGroupOffsets(
                replication_pb2.FetchGroupOffsetsRequest(
                    link_id=config.link_id, prefix=group_mapping.remote_prefix
                ),
                timeout=CALL_TIMEOUT_S,
            )
            offsets += [
                (o.group_id, o.topic, o.partition, o.offset, o.metadata, o.leader_epoch)
                for o in reply_offsets.offsets
            ]
        self._held_offsets = await apply_group_offsets(
            self.node, config.name, offsets + self._held_offsets
        )
        self._last_discovery = loop.time()

    async def pull(
        self, stub: replication_pb2_grpc.ReplicationAsyncStub, config: LinkConfig
    ) -> None:
        """This side follows and dials: fetch (discovery runs beside it)."""
        request, by_source = follower_request(self.node, config)
        if not request.partitions:
            if self._last_discovery > 0:
                # Discovered, and the followed namespaces hold no topics yet:
                # nothing lags (an empty namespace is FOLLOWING, not CATCHING_UP).
                self.node.state.links.on_fetch_round(self.name, self.node.clock())
            await asyncio.sleep(0.2)
            return
        fetched = await stub.ReplicaFetch(
            request, timeout=CALL_TIMEOUT_S + FETCH_MAX_WAIT_MS / 1000
        )
        await apply_fetched(self.node, config.name, fetched, by_source)
        if bool(fetched.sync_state) != (config.mode == "SYNC"):
            # The source runs the other mode: learn the change now, not at the
            # next periodic handshake.
            self._last_handshake = 0.0

    async def push(
        self, stub: replication_pb2_grpc.ReplicationAsyncStub, config: LinkConfig
    ) -> None:
        """This side leads and dials (the follower may sit behind NAT): serve the
        follower's last fetch request ourselves and push the answer."""
        loop = asyncio.get_running_loop()
        push = replication_pb2.ReplicaPushRequest(link_id=config.link_id)
        if loop.time() - self._last_discovery >= DISCOVERY_INTERVAL_S:
            push.namespaces.extend(leader_namespaces(self.node, config))
            for group_mapping in rep.leader_mappings(config, "group"):
                push.group_offsets.extend(group_offsets(self.node, group_mapping.local_prefix))
            self._last_discovery = loop.time()
        if self._next_fetch is not None and self._next_fetch.partitions:
            push.data.CopyFrom(await serve_fetch(self.node, self._next_fetch, from_remote=False))
        elif self._next_fetch is not None:
            await asyncio.sleep(0.2)
        reply = await stub.ReplicaPush(push, timeout=CALL_TIMEOUT_S)
        self.node.state.links.on_contact(self.name, self.node.clock())
        self._next_fetch = reply.next


# -- both ends of the data path, shared by pull and push -----------------------------
#
# Every decision is `linkd.core.link_rounds`'; these functions encode and
# decode the messages, wait (long poll), carry out effects and wake waiters.


def _error_pb(exc: ClusterError) -> errors_pb2.ErrorDetail:
    return errors_pb2.ErrorDetail(
        code=errors_pb2.ErrorCode.ValueType(int(exc.code)),
        resource=exc.resource,
        retriable=exc.retriable,
        message=exc.message,
    )


def _error_of(detail: errors_pb2.ErrorDetail) -> ClusterError:
    return ClusterError(ErrorCode(detail.code), detail.resource, detail.message)


def _namespace_pb(ns: rounds.SourceNamespace) -> replication_pb2.NamespaceTopics:
    out = replication_pb2.NamespaceTopics(prefix=ns.prefix)
    for topic in ns.topics:
        out.topics.add(name=topic.name, partitions=topic.partitions, configs=topic.configs)
    out.read_acls.extend(_read_acls_pb(list(ns.read_acls)))
    return out


def _namespace_of(prefix: str, topics: Any, read_acls: Any) -> rounds.SourceNamespace:
    return rounds.SourceNamespace(
        prefix,
        tuple(rounds.SourceTopic(t.name, t.partitions, dict(t.configs)) for t in topics),
        tuple((a.resource_name, a.prefixed, a.principal, a.host) for a in read_acls),
    )


def _fetch_answer_pb(answer: rounds.FetchAnswer) -> replication_pb2.ReplicaFetchResponse:
    out = replication_pb2.ReplicaFetchResponse(sync_state=answer.sync_state)
    for p in answer.partitions:
        entry = out.partitions.add(
            topic=p.source_topic, partition=p.partition, diverging_end_offset=-1
        )
        if p.error is not None:
            entry.error.CopyFrom(_error_pb(p.error))
            continue
        entry.log_end_offset = p.log_end_offset
        entry.leader_epoch = p.leader_epoch
        entry.log_start_offset = p.log_start_offset
        entry.high_watermark = p.high_watermark
        entry.diverging_end_offset = p.diverging_end_offset
        if p.diverging_end_offset >= 0:
            entry.diverging_epoch = p.diverging_epoch
        entry.records = p.records
    return out


def _fetch_answer_of(reply: replication_pb2.ReplicaFetchResponse) -> rounds.FetchAnswer:
    return rounds.FetchAnswer(
        [
            rounds.FetchedPartition(
                p.topic,
                p.partition,
                high_watermark=p.high_watermark,
                log_start_offset=p.log_start_offset,
                log_end_offset=p.log_end_offset,
                leader_epoch=p.leader_epoch,
                diverging_end_offset=p.diverging_end_offset,
                diverging_epoch=p.diverging_epoch,
                records=p.records,
                size_bytes=len(p.records),
                error=_error_of(p.error) if p.HasField("error") else None,
            )
            for p in reply.partitions
        ],
        sync_state=reply.sync_state,
    )


def follower_request(
    node: ClusterNode, config: LinkConfig
) -> tuple[replication_pb2.ReplicaFetchRequest, dict[tuple[str, int], str]]:
    """The follower's fetch request (`rounds.follower_fetch_request`), encoded;
    and the map back to local names."""
    request = rounds.follower_fetch_request(node.state, config, PARTITION_MAX_BYTES)
    out = replication_pb2.ReplicaFetchRequest(
        link_id=config.link_id, max_wait_ms=FETCH_MAX_WAIT_MS, max_bytes=FETCH_MAX_BYTES
    )
    for p in request.partitions:
        out.partitions.add(
            topic=p.source_topic,
            partition=p.partition,
            fetch_offset=p.fetch_offset,
            last_fetched_epoch=p.last_fetched_epoch,
            max_bytes=p.max_bytes,
        )
    return out, request.local_of


async def apply_topics(
    node: ClusterNode, config: LinkConfig, namespaces: list[rounds.SourceNamespace]
) -> None:
    """Follower side: carries out `rounds.plan_topics`."""
    plan = rounds.plan_topics(node.state, config, namespaces, node.topic_id_factory)
    for local, source in plan.created:
        log.info(
            "follower topic created",
            extra={"link": config.name, "topic": local, "source": source},
        )
    if plan.effects:
        await node._execute(plan.effects)


def _read_acls_pb(acls: list[rep.ReadAcl]) -> list[replication_pb2.ReadAcl]:
    return [
        replication_pb2.ReadAcl(resource_name=n, prefixed=p, principal=who, host=host)
        for n, p, who, host in acls
    ]


async def apply_fetched(
    node: ClusterNode,
    link_name: str,
    reply: replication_pb2.ReplicaFetchResponse,
    by_source: dict[tuple[str, int], str],
) -> None:
    """Follower side: carries out `rounds.apply_replica_fetch` (truncations,
    appends), then, once durable, `rounds.finish_fetch_round`."""
    state = node.state
    answer = _fetch_answer_of(reply)
    applied = rounds.apply_replica_fetch(state, link_name, answer, by_source, node.clock())
    for local, error in applied.refused:
        log.debug(
            "replica fetch refused",
            extra={"link": link_name, "topic": local, "error": error.message},
        )
    for cut in applied.truncations:
        log.warning(
            "follower truncated after divergence",
            extra={
                "link": link_name,
                "topic": cut.topic,
                "partition": cut.partition,
                "offset": cut.offset,
            },
        )
    if applied.effects:
        await node._execute(applied.effects)
    # Marker groups can move partitions beyond the round's.
    anywhere = bool(state.marker_groups)
    if rounds.finish_fetch_round(
        state, link_name, applied.progress, answer.sync_state, node.clock()
    ):
        node._notify_data(None if anywhere else [(p.topic, p.partition) for p in applied.progress])


async def apply_group_offsets(
    node: ClusterNode, link_name: str, offsets: list[rep.GroupOffset]
) -> list[rep.GroupOffset]:
    """Follower side: stores replicated committed offsets (journal records and
    the __consumer_offsets_<source> topic); returns those held back."""
    if not offsets:
        return []
    records, effects, held = rep.apply_replicated_offsets(
        node.state, link_name, offsets, node.clock(), node.topic_id_factory()
    )
    if records:
        await node._execute([*effects, Journal(tuple(records))])
    return held


def group_offsets(node: ClusterNode, prefix: str) -> list[replication_pb2.GroupOffset]:
    """Source side: `rounds.source_group_offsets`, encoded."""
    return [
        replication_pb2.GroupOffset(
            group_id=group_id,
            topic=topic,
            partition=partition,
            offset=offset,
            metadata=metadata,
            leader_epoch=epoch,
        )
        for group_id, topic, partition, offset, metadata, epoch in rounds.source_group_offsets(
            node.state, prefix
        )
    ]


def leader_namespaces(
    node: ClusterNode, config: LinkConfig
) -> list[replication_pb2.NamespaceTopics]:
    """Source side: `rounds.source_namespaces`, encoded."""
    return [_namespace_pb(ns) for ns in rounds.source_namespaces(node.state, config)]


async def serve_fetch(
    node: ClusterNode, request: replication_pb2.ReplicaFetchRequest, *, from_remote: bool
) -> replication_pb2.ReplicaFetchResponse:
    """Source side: answers a follower's fetch (`rounds.serve_replica_fetch`),
    waiting up to its max_wait_ms for data (long poll). A fetch that arrived
    from the remote is contact, every time it is served; one this side serves
    itself to push the answer is not."""
    state = node.state
    state.links.by_id(request.link_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, min(request.max_wait_ms, 30_000)) / 1000
    budget_bytes = request.max_bytes if request.max_bytes > 0 else FETCH_MAX_BYTES
    parts = [
        rounds.PartitionFetch(
            p.topic, p.partition, p.fetch_offset, p.last_fetched_epoch, p.max_bytes
        )
        for p in request.partitions
    ]

    def read(
        topic_id: str, partition: int, start: int, end: int, max_bytes: int
    ) -> tuple[bytes, int]:
        data = node.stores[(topic_id, partition)].read(start, end, max_bytes)
        return data, len(data)

    # A parked fetch wakes only for the partitions it reads.
    watch = [(p.source_topic, p.partition) for p in parts]
    while True:
        event = node.long_polls.park(watch)
        try:
            answer = rounds.serve_replica_fetch(
                state,
                request.link_id,
                parts,
                node.clock(),
                read,
                budget_bytes,
                PARTITION_MAX_BYTES,
                from_remote=from_remote,
            )
            if answer.hw_moved:
                node._notify_data()
            if answer.ready or loop.time() >= deadline or node._stopping:
                return _fetch_answer_pb(answer)
            await node.long_polls.wait(event, deadline - loop.time())
        finally:
            node.long_polls.unpark(event)


class ReplicationService(replication_pb2_grpc.ReplicationServicer):
    def __init__(self, node: ClusterNode, manager: LinkManager) -> None:
        self.node = node
        self.manager = manager

    async def _guard(self, context: Any, coro: Any) -> Any:
        try:
            return await coro
        except ClusterError as exc:
            await abort_with_error(context, exc)

    async def Handshake(
        self, request: replication_pb2.HandshakeRequest, context: Any
    ) -> replication_pb2.HandshakeResponse:
        async def run() -> replication_pb2.HandshakeResponse:
            self.node._check_ready()
            config = await self.manager.on_handshake(request.config, request.create)
            return replication_pb2.HandshakeResponse(config=view_of(config))

        result: replication_pb2.HandshakeResponse = await self._guard(context, run())
        return result

    async def RemoveLink(
        self, request: replication_pb2.RemoveLinkRequest, context: Any
    ) -> replication_pb2.RemoveLinkResponse:
        await self._guard(context, self.manager.on_remove(request.link_id))
        return replication_pb2.RemoveLinkResponse()

    async def ListSourceTopics(
        self, request: replication_pb2.ListSourceTopicsRequest, context: Any
    ) -> replication_pb2.ListSourceTopicsResponse:
        async def run() -> replication_pb2.ListSourceTopicsResponse:
            self.node._check_ready()
            state = self.node.state
            config = state.links.by_id(request.link_id)
            state.links.on_contact(config.name, self.node.clock())
            ns = _namespace_pb(rounds.source_topics(state, config, request.prefix))
            return replication_pb2.ListSourceTopicsResponse(
                topics=ns.topics, read_acls=ns.read_acls
            )

        result: replication_pb2.ListSourceTopicsResponse = await self._guard(context, run())
        return result

    async def ReplicaFetch(
        self, request: replication_pb2.ReplicaFetchRequest, context: Any
    ) -> replication_pb2.ReplicaFetchResponse:
        async def run() -> replication_pb2.ReplicaFetchResponse:
            self.node._check_ready()
            return await serve_fetch(self.node, request, from_remote=True)

        result: replication_pb2.ReplicaFetchResponse = await self._guard(context, run())
        return result

    async def ReplicaPush(
        self, request: replication_pb2.ReplicaPushRequest, context: Any
    ) -> replication_pb2.ReplicaPushResponse:
        async def run() -> replication_pb2.ReplicaPushResponse:
            self.node._check_ready()
            config = self.node.state.links.by_id(request.link_id)
            if request.namespaces:
                await apply_topics(
                    self.node,
                    config,
                    [_namespace_of(n.prefix, n.topics, n.read_acls) for n in request.namespaces],
                )
            if request.HasField("data"):
                _request, by_source = follower_request(self.node, config)
                await apply_fetched(self.node, config.name, request.data, by_source)
            if request.group_offsets:
                await apply_group_offsets(
                    self.node,
                    config.name,
                    [
                        (o.group_id, o.topic, o.partition, o.offset, o.metadata, o.leader_epoch)
                        for o in request.group_offsets
                    ],
                )
            else:
                self.node.state.links.on_contact(config.name, self.node.clock())
            nxt, _ = follower_request(self.node, config)
            if request.namespaces and not nxt.partitions:
                # Told the source's topics, and none to follow: nothing lags.
                self.node.state.links.on_fetch_round(config.name, self.node.clock())
            return replication_pb2.ReplicaPushResponse(next=nxt)

        result: replication_pb2.ReplicaPushResponse = await self._guard(context, run())
        return result

    async def FetchGroupOffsets(
        self, request: replication_pb2.FetchGroupOffsetsRequest, context: Any
    ) -> replication_pb2.FetchGroupOffsetsResponse:
        async def run() -> replication_pb2.FetchGroupOffsetsResponse:
            self.node._check_ready()
            self.node.state.links.by_id(request.link_id)
            return replication_pb2.FetchGroupOffsetsResponse(
                offsets=group_offsets(self.node, request.prefix)
            )

        result: replication_pb2.FetchGroupOffsetsResponse = await self._guard(context, run())
        return result

    async def DescribePartitions(
        self, request: replication_pb2.DescribePartitionsRequest, context: Any
    ) -> replication_pb2.DescribePartitionsResponse:
        from linkd.operations import describe_partitions

        async def run() -> replication_pb2.DescribePartitionsResponse:
            self.node._check_ready()
            return describe_partitions(self.node, request)

        result: replication_pb2.DescribePartitionsResponse = await self._guard(context, run())
        return result

    async def PromoteNamespaces(
        self, request: replication_pb2.PromoteNamespacesRequest, context: Any
    ) -> replication_pb2.PromoteNamespacesResponse:
        from linkd.operations import promote

        async def run() -> replication_pb2.PromoteNamespacesResponse:
            self.node._check_ready()
            return await promote(self.node, request)

        result: replication_pb2.PromoteNamespacesResponse = await self._guard(context, run())
        return result
