"""A data dir written before provenance entries were typed still loads.

`tests/data/datadir-2026-11/` holds cluster C of the disaster-recovery story
(tests/test_recovery_e2e.py) as the daemon wrote it on 2026-11-25, killed
with SIGKILL: `journal/` has every metadata record in the journal,
`snapshot/` the same state as a snapshot. A daemon of today starts on a copy
of each and reports the same history through `ccr-admin provenance` and the
same records.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_links_e2e import cli_json, high_watermarks, read_all

from linkd.core import link_admin
from linkd.core.cluster import ClusterState
from linkd.core.journal import KINDS, JournalRecordError, LinkDelete, decode, encode
from linkd.core.provenance import ProvenanceItem, ProvenanceKind

DATA = Path(__file__).resolve().parent / "data" / "datadir-2026-11"

EXPECTED = [
    ("start", 0, "A", 2),
    ("detached", 15, "", 0),
    ("truncated", 10, "", 0),
    ("start", 10, "B", 1),
    ("start", 13, "B", 2),
]


@pytest.mark.parametrize("form", ["journal", "snapshot"])
def test_a_data_dir_of_the_old_format_loads_with_its_history(
    daemon_factory: Any, tmp_path: Path, form: str
) -> None:
    data_dir = tmp_path / "C"
    shutil.copytree(DATA / form, data_dir)
    # Its records were written on the day the data dir was made: retention
    # (7 days by default) would delete them by now, as Kafka would. No
    # retention check runs while the test looks (the first comes an hour in).
    c = daemon_factory(
        "C", data_dir=data_dir, extra_args=["--log-retention-check-interval-ms", "3600000"]
    )
    report = cli_json(c.bootstrap, "provenance", "orders-dr")
    entries = report["partitions"][0]["provenance"]
    got = [(e["kind"], e["offset"], e["source_cluster_id"], e["link_epoch"]) for e in entries]
    assert got == EXPECTED
    assert entries[2]["removed_records"] == 5
    assert high_watermarks(c.bootstrap, "orders-dr") == [15]
    values = [v for _p, _o, _k, v, _t in read_all(c.bootstrap, "orders-dr")]
    assert values[:10] == [f"a-{i}".encode() for i in range(10)]
    assert values[10:13] == [f"b-{i}".encode() for i in range(3)]


def test_journal_entries_of_every_old_form_become_typed_items() -> None:
    state = ClusterState("C")
    created = {"type": "topic_create", "name": "t", "topic_id": "id-t", "partitions": 1}
    state.apply_record(decode({**created, "configs": {}}))
    old_entries: list[dict[str, Any]] = [
        {"start": 0, "source": "A", "link_id": "L1", "link_epoch": 3},
        {"detached_at": 7, "link_id": "L1"},
        {"truncated_to": 5, "link_id": "L2", "removed": 2},
        {
            "truncated_to": 4,
            "link_id": "L2",
            "removed": 1,
            "reason": "diverged",
            "offsets_moved": [["g1", 5]],
        },
    ]
    for entry in old_entries:
        stored = {"type": "provenance", "name": "t", "partition": 0, "entry": entry}
        state.apply_record(decode(stored))
    items = state.topics["t"].provenance[0]
    assert all(isinstance(i, ProvenanceItem) for i in items)
    assert [i.kind for i in items] == [
        ProvenanceKind.START,
        ProvenanceKind.DETACHED,
        ProvenanceKind.TRUNCATED,
        ProvenanceKind.TRUNCATED,
    ]
    assert items[3].offsets_moved == (("g1", 5),) and items[3].reason == "diverged"
    # The stored form is the old one, so older daemons read what we write.
    assert [i.to_entry() for i in items] == old_entries
    restored = ClusterState("C")
    restored.restore(state.snapshot())
    assert restored.topics["t"].provenance[0] == items


def test_a_bad_entry_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="not a provenance entry"):
        ProvenanceItem.from_entry({"begin": 3})


def test_every_record_a_link_deletion_journals__replays() -> None:
    """A link deleted here, then the remote told of it: a restart replays
    `link_config`, `link_delete` and `link_removal_told` (the last once fell
    through to the group coordinator and the daemon could not start)."""
    state = ClusterState("C")
    config = state.links.new_config("cb", "id-cb", "B", "b:1", "", "local_dials", "", 1000)
    journal = list(state.links.store(config, 1000))
    for effect in link_admin.delete_link(state, "cb", False, 2000):
        journal += list(getattr(effect, "records", ()))
    journal += state.links.removal_told("id-cb")
    assert {r.TYPE for r in journal} >= {"link_config", "link_delete", "link_removal_told"}
    restarted = ClusterState("C")
    for record in journal:
        restarted.apply_record(decode(json.loads(json.dumps(encode(record)))))
    assert restarted.links.tombstones["id-cb"].told


def test_an_unknown_record_type_or_a_missing_field_is_refused_by_name() -> None:
    with pytest.raises(JournalRecordError, match="unknown type 'no_such_record'"):
        decode({"type": "no_such_record"})
    with pytest.raises(JournalRecordError, match="'offset_delete' has no field 'partition'"):
        decode({"type": "offset_delete", "group": "g", "topic": "t"})
    with pytest.raises(JournalRecordError, match="'topic_create': field 'partitions' is '3'"):
        decode({"type": "topic_create", "name": "t", "topic_id": "i", "partitions": "3",
                "configs": {}})


def test_every_record_kind__stored_form_round_trips_and_matches_what_older_versions_wrote(
) -> None:
    """The stored form did not change with the typed records: each kind, as
    written before them, decodes and encodes back to the same JSON."""
    written_before = [
        {"type": "topic_create", "name": "t", "topic_id": "i", "partitions": 2, "configs": {}},
        {"type": "topic_delete", "name": "t"},
        {"type": "topic_config", "name": "t", "configs": {"retention.ms": "5"}},
        {"type": "topic_partitions", "name": "t", "partitions": 3},
        {"type": "provenance", "name": "t", "partition": 0, "entry": {"detached_at": 7,
                                                                      "link_id": "L"}},
        {"type": "leader_epoch", "name": "t", "partition": 0, "epoch": 2, "start": 9},
        {"type": "log_start", "name": "t", "partition": 1, "offset": 4},
        {"type": "epochs_cut", "name": "t", "partition": 0, "offset": 7},  # new kind
        {"type": "pid_block", "next": 2000},
        {"type": "txn", "id": "x", "pid": 1, "epoch": 0, "timeout_ms": 60000,
         "state": "Ongoing", "partitions": [["t", 0]], "groups": ["g"], "started_ms": 5},
        {"type": "offset_commit", "group": "g", "topic": "t", "partition": 0, "offset": 3,
         "metadata": "", "leader_epoch": -1, "ts": 7},
        {"type": "offset_delete", "group": "g", "topic": "t", "partition": 0},
        {"type": "group_delete", "group": "g"},
        {"type": "txn_offset_stage", "group": "g", "producer_id": 1, "topic": "t",
         "partition": 0, "offset": 3, "metadata": "", "leader_epoch": -1, "ts": 7},
        {"type": "txn_offset_end", "group": "g", "producer_id": 1, "commit": True, "ts": 8},
        {"type": "acl_create", "binding": [2, "t", 3, "User:a", "*", 3, 3]},
        {"type": "acl_delete", "binding": [2, "t", 3, "User:a", "*", 3, 3]},
        {"type": "ns_create", "resource_type": "topic", "prefix": "p-", "reserved": False},
        {"type": "ns_reserved", "resource_type": "topic", "prefix": "p-", "reserved": True},
        {"type": "ns_delete", "resource_type": "topic", "prefix": "p-"},
        {"type": "ns_attach", "resource_type": "topic", "prefix": "p-", "link": "ab",
         "role": "follower"},
        {"type": "ns_detach", "resource_type": "topic", "prefix": "p-", "link": "ab"},
        {"type": "link_config", "config": {"name": "ab"}},
        {"type": "link_delete", "name": "ab", "link_id": "i", "remote": "B", "address": "b:1",
         "told": False},
        {"type": "link_removal_told", "link_id": "i"},
        {"type": "mirror_link_create", "name": "m", "alias": "B", "properties": "x=1",
         "created_ms": 3},
        {"type": "mirror_link_delete", "name": "m", "deleted_ms": 9},
        {"type": "scram_upsert", "user": "alice", "mechanism": 1, "salt": "c2FsdA==",  # new kind
         "iterations": 4096, "stored_key": "c3Q=", "server_key": "c2s="},
        {"type": "scram_delete", "user": "alice", "mechanism": 2},  # new kind
        {"type": "broker_config", "broker": "",  # new kind
         "configs": {"log.retention.ms": "60000"}},
        {"type": "group_config", "group": "g",  # new kind
         "configs": {"consumer.session.timeout.ms": "50000"}},
        {"type": "procedure_plan", "link": "ab",  # new kind: a reversal's durable plan
         "plan": {"procedure": "reverse", "link": "ab", "link_id": "i",
                  "remote_cluster_id": "B", "namespaces": [["topic", "p-", "p-", False]],
                  "timeout_ms": 30000, "started_ms": 5,
                  "steps": [{"name": "verify-link-state", "ok": True,
                             "result": "link is FOLLOWING", "duration_ms": 0}],
                  "restarts": 0}},
        {"type": "procedure_plan", "link": "ab"},  # the plan ended
    ]
    assert {r["type"] for r in written_before} == set(KINDS)
    # Grown since: a tombstone keeps the link's sealed secrets (link sessions),
    # empty in records written before them.
    grown = {"link_delete": {"link_key": "", "credentials": ""}}
    for stored in written_before:
        expected = {**stored, **grown.get(str(stored["type"]), {})}
        assert encode(decode(json.loads(json.dumps(stored)))) == expected
    # Written before tombstones: read, with nothing to tell the remote.
    assert decode({"type": "link_delete", "name": "ab"}) == LinkDelete("ab")
