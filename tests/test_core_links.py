"""Links and replication in the core: configuration convergence, the state
machine, and the follower copying byte for byte with divergence detection."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkd.core import link_admin as admin
from linkd.core import link_rounds as rounds
from linkd.core import metadata_sync as msync
from linkd.core import records as rb
from linkd.core import replication as rep
from linkd.core.cluster import AppendBatch, ClusterState, Journal, TruncateLog
from linkd.core.errors import ClusterError, ErrorCode
from linkd.core.journal import EpochsCut, decode
from linkd.core.links import (
    Field,
    LinkLimits,
    LinkState,
    LinkTable,
    Mapping,
    merge_configs,
)

NOW = 1_700_000_000_000


def two_sides() -> tuple[LinkTable, LinkTable]:
    a, b = LinkTable("A"), LinkTable("B")
    config = a.new_config("ab", "id-1", "B", "b:1", "secret", "local_dials", "a:1", NOW)
    a.store(config, NOW)
    b.accept_mirror(config, NOW)
    return a, b


def test_mirror__swaps_ids_prefixes_leaders_and_addresses() -> None:
    a, b = two_sides()
    mine = a.get("ab")
    mine.mappings[("topic", "orders-", "remote-")] = Mapping(
        "topic", "orders-", "remote-", "local", True, (NOW, 0, "A")
    )
    theirs = mine.mirrored()
    assert (theirs.local_cluster_id, theirs.remote_cluster_id) == ("B", "A")
    assert theirs.value("remote_bootstrap") == "a:1"
    assert theirs.connection_direction == "remote_dials"
    m = theirs.mappings[("topic", "remote-", "orders-")]
    assert (m.remote_prefix, m.leader, m.local_role) == ("orders-", "remote", "follower")
    assert theirs.mirrored().to_record() == mine.to_record()
    assert b.get("ab").local_cluster_id == "B"


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32), steps=st.integers(1, 30))
def test_configs_converge_after_arbitrary_concurrent_edits(seed: int, steps: int) -> None:
    """Both sides edit fields and mappings during a partition; after one
    exchange each way, in either order, both hold the same (mirrored) config."""
    rng = random.Random(seed)
    a, b = two_sides()
    now = NOW
    for _ in range(steps):
        now += rng.randint(0, 3)  # clocks may stand still: the HLC still orders
        k = rng.randint(0, 3)
        attached = rng.random() < 0.7
        if rng.random() < 0.3:
            side = a if rng.random() < 0.5 else b
            side.set_field("ab", "mode", rng.choice(["ASYNC", "SYNC"]), now)
            # A field only this side sets: it never crosses.
            side.set_field("ab", "credentials", f"{side.cluster_id}{rng.randint(0, 9)}", now)
        elif rng.random() < 0.5:  # A edits mapping k (A's "a{k}-" leads B's "b{k}-")
            a.put_mapping(
                "ab", Mapping("topic", f"a{k}-", f"b{k}-", "local", attached, (0, 0, "")), now
            )
        else:  # B edits the same mapping, from its side
            b.put_mapping(
                "ab", Mapping("topic", f"b{k}-", f"a{k}-", "remote", attached, (0, 0, "")), now
            )
    first, second = (a, b) if rng.random() < 0.5 else (b, a)
    second.accept_mirror(first.get("ab"), now)
    first.accept_mirror(second.get("ab"), now)
    assert a.get("ab").agreed_record() == b.get("ab").mirrored().agreed_record()
    for side in (a, b):
        assert side.get("ab").value("credentials") in ("secret", "") or (
            side.get("ab").value("credentials").startswith(side.cluster_id)
        )


def test_a_remote_cannot_set_the_address_this_side_dials_nor_its_secrets() -> None:
    """The attack of issue 15: a newer `local_bootstrap` (and credentials,
    and a key) in a remote's view rewrote the address this side dials."""
    a, b = two_sides()
    forged = b.get("ab")
    for key, value in (("local_bootstrap", "evil:1"), ("credentials", "x"), ("link_key", "k")):
        forged.fields[key] = Field(value, (NOW + 10_000, 0, "B"))
    a.accept_mirror(forged, NOW + 1)
    mine = a.get("ab")
    assert mine.value("remote_bootstrap") == "b:1"
    assert mine.value("credentials") == "secret"
    assert mine.value("link_key") == ""
    # What crosses carries no secret and not the address the sender dials.
    assert set(mine.shared().fields) == {"mode", "local_bootstrap"}


def test_merge_refuses_a_config_of_another_link() -> None:
    a, _b = two_sides()
    other = LinkTable("B").new_config("ab", "id-2", "A", "a:1", "", "local_dials", "", NOW)
    with pytest.raises(ClusterError) as info:
        merge_configs(a.get("ab"), other.mirrored())
    assert info.value.code == ErrorCode.INVALID_LINK_CONFIG


def test_state_machine__disconnected_catching_up_following_with_times() -> None:
    table = LinkTable(
        "B", LinkLimits(session_timeout_ms=1000, lag_max_records=0, lag_max_ms=60_000)
    )
    config = table.new_config("ab", "id", "A", "a:1", "", "local_dials", "", NOW)
    table.store(config, NOW)
    assert table.state_name("ab") == "DISCONNECTED"
    table.on_contact("ab", NOW + 10)
    assert table.state_name("ab") == "FOLLOWING"
    table.on_progress("ab", "t", 0, "follower", 5, 10, NOW + 20)
    assert table.state_name("ab") == "CATCHING_UP"
    table.on_progress("ab", "t", 0, "follower", 10, 10, NOW + 30)
    assert table.state_name("ab") == "FOLLOWING"
    table.tick(NOW + 30 + 1001)
    assert table.state_name("ab") == "DISCONNECTED"
    runtime = table.runtime["ab"]
    assert [s for s, _ in runtime.history] == [
        "DISCONNECTED",
        "FOLLOWING",
        "CATCHING_UP",
        "FOLLOWING",
        "DISCONNECTED",
    ]
    assert runtime.entered_at_ms == NOW + 1031


# -- the data path ------------------------------------------------------------------


def linked_states() -> tuple[ClusterState, ClusterState]:
    source, follower = ClusterState("A"), ClusterState("B")
    source.namespaces.create(1, "orders-", False)
    config = source.links.new_config("ab", "id-1", "B", "b:1", "", "local_dials", "", NOW)
    source.links.store(config, NOW)
    mapping = Mapping("topic", "orders-", "orders-", "local", True, (0, 0, ""))
    admin.put_mapping(source, "ab", admin.versioned(source, mapping, NOW), NOW)
    follower.links.accept_mirror(source.links.get("ab"), NOW)
    admin.reconcile_attachments(follower, "ab", NOW)
    source.create_topic("orders-1", 1, {}, "src-id")
    rep.create_replica_topic(follower, "orders-1", 1, {}, "fol-id")
    return source, follower


def produce(state: ClusterState, n: int) -> None:
    batch = rb.build_batch([rb.RecordSpec(b"k", f"v{i}".encode(), NOW + i) for i in range(n)])
    state.produce("orders-1", 0, batch, "", NOW)
    log = state.partition("orders-1", 0)
    state.mark_durable("orders-1", 0, log.log_end_offset)


def replicate(source: ClusterState, follower: ClusterState, stored: list[bytes]) -> None:
    """One fetch round; `stored` plays the source's segment files."""
    offset, epoch = rep.follower_position(follower, "orders-1", 0)
    plan = rep.plan_replica_fetch(source, "id-1", "orders-1", 0, offset, epoch)
    if isinstance(plan, rep.Diverged):
        rep.cut_replica(follower, "orders-1", 0, plan.end_offset, now_ms=NOW)
        return
    data = b"".join(
        b
        for b in stored
        if rb.parse_header(b).last_offset >= plan.offset
        and rb.parse_header(b).base_offset < plan.upper_offset
    )
    for e in rep.append_replica(follower, "orders-1", 0, data, plan.log_start_offset):
        assert isinstance(e, AppendBatch)
    # The shell wrote them: durable (the next fetch offset acknowledges them).
    follower.mark_durable("orders-1", 0, follower.partition("orders-1", 0).log_end_offset)


def test_follower_copies_byte_for_byte__and_follower_namespace_is_reserved() -> None:
    source, follower = linked_states()
    stored: list[bytes] = []
    for n in (3, 1, 4):
        batch = rb.build_batch([rb.RecordSpec(None, f"{n}-{i}".encode(), NOW) for i in range(n)])
        result = source.produce("orders-1", 0, batch, "", NOW)
        stored += [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    source.mark_durable("orders-1", 0, 8)
    replicate(source, follower, stored)
    assert follower.partition("orders-1", 0).log_end_offset == 8
    assert [b.base_offset for b in follower.partition("orders-1", 0).batches] == [0, 3, 4]
    with pytest.raises(ClusterError) as info:
        follower.produce("orders-1", 0, rb.build_batch([rb.RecordSpec(None, b"x", NOW)]), "", NOW)
    assert info.value.code == ErrorCode.FOLLOWER_TOPIC_NOT_WRITABLE
    assert "ab" in info.value.message


def test_async_follower_copies_only_up_to_the_source_high_watermark() -> None:
    source, follower = linked_states()
    stored: list[bytes] = []
    result = source.produce(
        "orders-1", 0, rb.build_batch([rb.RecordSpec(None, b"x", NOW)]), "", NOW
    )
    stored += [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    replicate(source, follower, stored)  # not durable yet: HW 0
    assert follower.partition("orders-1", 0).log_end_offset == 0


def test_unclean_election_on_the_source__follower_truncates_to_the_matching_point() -> None:
    source, follower = linked_states()
    stored: list[bytes] = []
    for _ in range(3):
        result = source.produce(
            "orders-1", 0, rb.build_batch([rb.RecordSpec(None, b"a", NOW)] * 2), "", NOW
        )
        stored += [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    source.mark_durable("orders-1", 0, 6)
    replicate(source, follower, stored)
    assert follower.partition("orders-1", 0).log_end_offset == 6
    # Emulated unclean election: the source loses offsets 2.. and bumps its epoch.
    log = source.partition("orders-1", 0)
    log.truncate_to(2)
    log.bump_epoch(1, 2)
    stored = stored[:1]
    result = source.produce(
        "orders-1", 0, rb.build_batch([rb.RecordSpec(None, b"new", NOW)]), "", NOW
    )
    stored += [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    source.mark_durable("orders-1", 0, 3)
    replicate(source, follower, stored)  # diverged: truncate
    assert follower.partition("orders-1", 0).log_end_offset == 2
    replicate(source, follower, stored)  # then copy the new history
    flog = follower.partition("orders-1", 0)
    assert flog.log_end_offset == 3 and flog.leader_epoch == 1


def test_cut_replica_returns_the_effect_at_a_batch_boundary() -> None:
    source, follower = linked_states()
    stored: list[bytes] = []
    for _ in range(2):
        result = source.produce(
            "orders-1", 0, rb.build_batch([rb.RecordSpec(None, b"a", NOW)] * 3), "", NOW
        )
        stored += [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    source.mark_durable("orders-1", 0, 6)
    replicate(source, follower, stored)
    effects = rep.cut_replica(follower, "orders-1", 0, 4, now_ms=NOW).effects
    # The cut, and the journal's word that epoch bumps from 3 on are void.
    assert effects == [TruncateLog("fol-id", 0, 3), Journal((EpochsCut("orders-1", 0, 3),))]


def test_acl_sync__read_follows_the_link__write_never_does() -> None:
    from linkd.core.acls import AclBinding, AclFilter, AclOperation, PatternType, PermissionType
    from linkd.core.acls import ResourceType as R

    source, follower = linked_states()
    follower.links.get("ab").mappings[("topic", "orders-", "orders-")] = Mapping(
        "topic", "orders-", "orders-", "remote", True, (NOW, 0, "A")
    )

    def allow(name: str, op: int, pattern: int = PatternType.LITERAL) -> AclBinding:
        return AclBinding(R.TOPIC, name, pattern, "User:alice", "*", op, PermissionType.ALLOW)

    deny_bob = AclBinding(
        R.TOPIC, "orders-1", PatternType.LITERAL, "User:bob", "*", AclOperation.READ,
        PermissionType.DENY,
    )
    source.acls.create(
        [
            allow("orders-1", AclOperation.READ),
            allow("orders-", AclOperation.ALL, PatternType.PREFIXED),
            allow("orders-1", AclOperation.WRITE),
            allow("other", AclOperation.READ),
            deny_bob,
        ]
    )
    acls = msync.source_read_acls(source, "orders-")
    assert acls == [
        msync.ReadAcl("orders-", True, "User:alice", "*"),
        msync.ReadAcl("orders-1", False, "User:alice", "*"),
        msync.ReadAcl("orders-1", False, "User:bob", "*", deny=True),
    ]
    records = msync.apply_read_acls(follower, "ab", "orders-", acls)
    synced = follower.acls.describe(AclFilter(resource_type=R.TOPIC))
    assert len(records) == 3
    assert {(b.resource_name, b.principal, b.operation, b.permission_type) for b in synced} == {
        ("orders-", "User:alice", AclOperation.READ, PermissionType.ALLOW),
        ("orders-1", "User:alice", AclOperation.READ, PermissionType.ALLOW),
        ("orders-1", "User:bob", AclOperation.READ, PermissionType.DENY),
    }
    assert msync.apply_read_acls(follower, "ab", "orders-", acls) == []  # idempotent


def test_principal_namespace__its_principals_read_and_describe_acls_follow__renamed() -> None:
    """KIP-986's third namespace type: the ACLs of principals in an attached
    principal namespace follow the link, READ and DESCRIBE only (ALL as READ,
    DENY too), with the principal renamed by the mapping and topic and group
    names by the link's follower namespaces."""
    from linkd.core.acls import AclBinding, AclFilter, AclOperation, PatternType, PermissionType
    from linkd.core.acls import ResourceType as R

    source, follower = linked_states()
    config = follower.links.get("ab")
    config.mappings.clear()  # (linked_states follows orders- as orders-)
    for mapping in (
        Mapping("topic", "backup-", "orders-", "remote", True, (NOW, 0, "A")),
        Mapping("group", "dr-app-", "app-", "remote", True, (NOW, 0, "A")),
        Mapping("principal", "User:dr-", "User:eu-", "remote", True, (NOW, 0, "A")),
    ):
        config.mappings[mapping.key] = mapping

    def binding(kind: int, name: str, principal: str, op: int,
                permission: int = PermissionType.ALLOW) -> AclBinding:
        return AclBinding(kind, name, PatternType.LITERAL, principal, "*", op, permission)

    source.acls.create([
        binding(R.TOPIC, "orders-1", "User:eu-app", AclOperation.READ),
        binding(R.TOPIC, "orders-1", "User:eu-app", AclOperation.WRITE),  # never follows
        binding(R.TOPIC, "elsewhere", "User:eu-app", AclOperation.ALL),  # as READ, same name
        binding(R.GROUP, "app-1", "User:eu-app", AclOperation.READ),
        binding(R.TOPIC, "orders-1", "User:eu-bad", AclOperation.READ, PermissionType.DENY),
        binding(R.CLUSTER, "kafka-cluster", "User:eu-app", AclOperation.DESCRIBE),  # not a
        binding(R.TOPIC, "orders-1", "User:us-app", AclOperation.READ),  # not in the namespace
    ])
    acls = msync.source_principal_acls(source, "User:eu-")
    assert len(acls) == 4 and all(a.principal.startswith("User:eu-") for a in acls)
    records = msync.apply_principal_acls(follower, "ab", "User:eu-", acls)
    assert len(records) == 4
    synced = {
        (R(b.resource_type).name, b.resource_name, b.principal, AclOperation(b.operation).name,
         PermissionType(b.permission_type).name)
        for b in follower.acls.describe(AclFilter())
    }
    assert synced == {
        ("TOPIC", "backup-1", "User:dr-app", "READ", "ALLOW"),
        ("TOPIC", "elsewhere", "User:dr-app", "READ", "ALLOW"),
        ("GROUP", "dr-app-1", "User:dr-app", "READ", "ALLOW"),
        ("TOPIC", "backup-1", "User:dr-bad", "READ", "DENY"),
    }
    assert msync.apply_principal_acls(follower, "ab", "User:eu-", acls) == []  # idempotent
    # A remote cannot slip in a principal outside the namespace it follows.
    forged = [dataclasses.replace(acls[0], principal="User:admin")]
    assert msync.apply_principal_acls(follower, "ab", "User:eu-", forged) == []
    # Nothing for a namespace this side does not follow.
    assert msync.apply_principal_acls(follower, "ab", "User:other-", acls) == []


def test_follower_is_catching_up_until_a_fetch_round_tells_its_lag() -> None:
    table = LinkTable("B", LinkLimits(session_timeout_ms=1000))
    config = table.new_config("ab", "id", "A", "a:1", "", "local_dials", "", NOW)
    mapping = Mapping("topic", "t-", "t-", "remote", True, (NOW, 0, "B"))
    config.mappings[mapping.key] = mapping
    table.store(config, NOW)
    table.on_contact("ab", NOW + 1)  # a handshake: connected, lag unknown
    assert table.state_name("ab") == "CATCHING_UP"
    table.on_progress("ab", "t-1", 0, "follower", 7, 7, NOW + 2)
    table.on_fetch_round("ab", NOW + 2)
    assert table.state_name("ab") == "FOLLOWING"
    table.tick(NOW + 2000)  # contact lost: the next connection starts unknown again
    table.on_contact("ab", NOW + 2001)
    assert table.state_name("ab") == "CATCHING_UP"


def test_provenance__start_entry_on_first_append__detached_entry_on_detach() -> None:
    source, follower = linked_states()
    config = follower.links.get("ab")
    result = source.produce(
        "orders-1", 0, rb.build_batch([rb.RecordSpec(None, b"a", NOW)] * 2), "", NOW
    )
    stored = [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    source.mark_durable("orders-1", 0, 2)
    rep.append_replica(follower, "orders-1", 0, stored[0], 0, config)
    rep.append_replica(follower, "orders-1", 0, b"", 0, config)  # nothing new: no entry
    entries = [e.to_entry() for e in follower.topic("orders-1").provenance[0]]
    assert entries == [
        {"start": 0, "source": "A", "link_id": "id-1", "link_epoch": config.link_epoch}
    ]
    detached = admin.check_detach(follower, "ab", "topic", "orders-")
    detached = admin.versioned(follower, detached, NOW + 1)
    admin.put_mapping(follower, "ab", detached, NOW + 1)
    last = follower.topic("orders-1").provenance[0][-1]
    assert last.to_entry() == {"detached_at": 2, "link_id": "id-1"}
    summary = rep.provenance_summary(follower, "orders-1", 0)
    assert summary == rep.ProvenanceSummary(entries=2, start_offset=2, source="")


def test_divergence_cut__replicated_group_offsets_past_it_move_back__and_are_reported() -> None:
    """Invariant 6: a replicated committed offset never exceeds the follower's
    log, even after an automatic truncation; the cut's provenance entry says
    which groups moved and from where."""
    source, follower = linked_states()
    stored: list[bytes] = []
    for i in range(6):
        batch = rb.build_batch([rb.RecordSpec(None, f"r{i}".encode(), NOW)])
        result = source.produce("orders-1", 0, batch, "", NOW)
        stored += [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    source.mark_durable("orders-1", 0, 6)
    replicate(source, follower, stored)
    follower.namespaces.create(2, "app-", True)  # replicated groups: reserved
    for group, offset in (("app-billing", 6), ("app-audit", 3), ("own-reader", 6)):
        follower.groups.apply_record(
            decode({
                "type": "offset_commit",
                "group": group,
                "topic": "orders-1",
                "partition": 0,
                "offset": offset,
                "metadata": "",
                "leader_epoch": -1,
                "ts": NOW,
            })
        )
    cut = rep.cut_replica(follower, "orders-1", 0, 4, follower.links.get("ab"), now_ms=NOW)
    effects = cut.effects
    assert isinstance(effects[0], TruncateLog) and effects[0].offset == 4

    def committed(group: str) -> int:
        return follower.groups.committed(group, [("orders-1", 0)])[("orders-1", 0)].offset

    assert committed("app-billing") == 4  # moved back to the cut
    assert committed("app-audit") == 3  # below the cut: untouched
    assert committed("own-reader") == 6  # a group of the follower's own: not replication's
    entry = follower.topics["orders-1"].provenance[0][-1].to_entry()
    assert entry["truncated_to"] == 4 and entry["removed"] == 2
    assert entry["offsets_moved"] == [["app-billing", 6]]


def test_the_fetch_offset__is_how_far_the_follower_log_is_durable__never_more() -> None:
    """On a SYNC link the fetch offset acknowledges: an append still being
    written (a round started again while the last one's write is in flight)
    is not acknowledged, and the batches fetched again are skipped."""
    source, follower = linked_states()
    stored: list[bytes] = []
    for n in (3, 2):
        batch = rb.build_batch([rb.RecordSpec(None, f"{n}-{i}".encode(), NOW) for i in range(n)])
        result = source.produce("orders-1", 0, batch, "", NOW)
        stored += [e.batch for e in result.effects if isinstance(e, AppendBatch)]
    source.mark_durable("orders-1", 0, 5)
    rep.append_replica(follower, "orders-1", 0, stored[0], 0)  # written, not yet durable

    assert rep.follower_position(follower, "orders-1", 0) == (0, -1)

    follower.mark_durable("orders-1", 0, 3)
    assert rep.follower_position(follower, "orders-1", 0)[0] == 3
    # Fetched again from 0: what it holds is skipped, the rest appended.
    effects = rep.append_replica(follower, "orders-1", 0, b"".join(stored), 0)
    assert [e.header.base_offset for e in effects if isinstance(e, AppendBatch)] == [3]
    assert follower.partition("orders-1", 0).log_end_offset == 5


def test_copying_behind__a_follower_partition_still_copying_from_its_own_source() -> None:
    """What lets a follower ahead of this cluster's copy wait rather than be
    cut to its log end (`plan_replica_fetch`, `check_marks`): this cluster's
    partition copies from a source of its own and has not caught up. A
    partition its link refuses or holds, a link that is disconnected, and a
    partition this cluster leads do not."""
    source, follower = linked_states()
    assert follower.links.state_of("ab") is LinkState.DISCONNECTED
    assert not rep.copying_behind(follower, "orders-1", 0)  # no contact: it may never catch up
    follower.links.on_contact("ab", NOW)
    assert rep.copying_behind(follower, "orders-1", 0)  # not fetched yet
    follower.links.on_progress("ab", "orders-1", 0, "follower", 3, 5, NOW)
    assert rep.copying_behind(follower, "orders-1", 0)  # 2 records behind
    follower.links.on_progress("ab", "orders-1", 0, "follower", 5, 5, NOW)
    assert not rep.copying_behind(follower, "orders-1", 0)  # caught up
    follower.links.on_progress("ab", "orders-1", 0, "follower", 3, 5, NOW)
    runtime = follower.links.runtime["ab"]
    runtime.refused[("orders-1", 0)] = ClusterError(ErrorCode.DIVERGED_LOG, "x", "held")
    assert not rep.copying_behind(follower, "orders-1", 0)  # held: it will not catch up
    assert not rep.copying_behind(source, "orders-1", 0)  # led here


def test_a_held_fetch_arriving_after_a_detach__leaves_no_row_on_the_source() -> None:
    """A follower's fetch that holds a partition uncut for its own writes,
    answered after the source detached the namespace (it was on its way):
    refused as any fetch of a partition the link no longer leads, and no row
    is left behind. (A row left there kept the link CATCHING_UP for ever on
    the source, naming a partition it no longer led.)"""
    source, _follower = linked_states()
    source.refresh_led_partitions(NOW)
    source.links.on_contact("ab", NOW)
    [attached] = source.links.get("ab").mappings.values()
    detached = admin.versioned(source, dataclasses.replace(attached, attached=False), NOW + 1)
    admin.put_mapping(source, "ab", detached, NOW + 1)
    source.refresh_led_partitions(NOW + 1)
    held = rounds.PartitionFetch("orders-1", 0, 3, 0, held=True)
    answer = rounds.serve_replica_fetch(
        source, "id-1", [held], NOW + 2, lambda *_: (b"", 0), 1 << 20, 1 << 20
    )
    [entry] = answer.partitions
    assert entry.error is not None and entry.error.code is ErrorCode.NOT_LED_ON_LINK
    assert not entry.held
    assert [k for k in source.links.runtime["ab"].partitions if k[2] == "leader"] == []
    assert source.links.state_name("ab") == "FOLLOWING"
