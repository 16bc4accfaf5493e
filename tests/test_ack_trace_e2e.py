"""The acknowledgement trace (linkd/ack_trace.py) on real daemons: with
LINKD_ACK_TRACE set, one acks=all produce over a SYNC link (the follower
pulls, or the leader pushes) leaves every hop of its acknowledgement, in
order, on the daemon it happens on; without it, nothing is written."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from test_links_e2e import wait_for

from admin import AdminClient, Producer
from linkd import ack_trace
from linkd.core import records as rb

FLAGS = ["--link-session-timeout-ms", "10000", "--link-replica-lag-time-max-ms", "10000"]
WAIT_S = 60.0


def link_state(bootstrap: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        return admin.describe_link(name).state
    finally:
        admin.close()


def wait_states(name: str, state: str, *bootstraps: str) -> None:
    for bootstrap in bootstraps:
        wait_for(f"{state} on {bootstrap}",
                 partial(lambda at: link_state(at, name) == state, bootstrap), WAIT_S)  # fmt: skip


@pytest.mark.parametrize("direction", ["pull", "push"])
def test_one_sync_acknowledgement_is_traced_hop_by_hop(
    daemon_factory: Any, tmp_path: Path, direction: str
) -> None:
    trace = tmp_path / "trace.jsonl"
    daemons = []
    for cluster_id in ("A", "B"):
        d = daemon_factory(cluster_id, extra_args=FLAGS, start=False)
        d.env[ack_trace.ENV] = str(trace)
        d.start()
        d.wait_ready()
        daemons.append(d)
    a, b = daemons
    admin_a = AdminClient({"bootstrap.servers": a.bootstrap})
    admin_b = AdminClient({"bootstrap.servers": b.bootstrap})
    try:
        admin_a.create_namespace("topic", "orders-")
        admin_a.create_topic("orders-t", partitions=1)
        admin_b.create_namespace("topic", "orders-")
        if direction == "pull":
            # B dials A and pulls, as bench/sync_latency.py's followers do.
            dialer, name = admin_b, "ba"
            admin_b.create_link(name, a.bootstrap)
            admin_b.attach_namespace(name, "topic", "orders-", "orders-", "remote")
        else:
            # A dials B and pushes (a follower behind NAT).
            dialer, name = admin_a, "ab"
            admin_a.create_link(name, b.bootstrap)
            admin_a.attach_namespace(name, "topic", "orders-", "orders-", "local")
        wait_states(name, "FOLLOWING", a.bootstrap, b.bootstrap)
        dialer.set_link_mode(name, "sync")
        wait_states(name, "IN_SYNC", a.bootstrap, b.bootstrap)
    finally:
        admin_a.close()
        admin_b.close()
    assert not any(e["hop"] == "produce.received" for e in ack_trace.read(trace))

    producer = Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 0})
    sent = time.time_ns()
    producer.produce("orders-t", value=b"traced")
    assert producer.flush(WAIT_S) == 0
    producer.close()

    produces = ack_trace.line_up(ack_trace.read(trace), "orders-t")
    assert len(produces) == 1
    hops = produces[0]
    expected = ack_trace.HOPS if direction == "pull" else ack_trace.PUSH_HOPS
    where = {name: "B" if name.startswith("follower.") else "A" for name in expected}
    # The follower's fetch may be woken and answered before the produce's
    # own task goes on past its append: "produce.written" has no fixed place
    # between the first hop and the last.
    assert [(h.name, h.cluster) for h in hops if h.name != "produce.written"] == [
        (name, where[name]) for name in expected if name != "produce.written"
    ]
    names = [h.name for h in hops]
    assert names[0] == "produce.received" and names[-1] == "produce.acked"
    assert ("produce.written", "A") in [(h.name, h.cluster) for h in hops]
    times = [h.t_ns for h in hops]
    assert times == sorted(times) and sent <= times[0] <= times[-1] <= time.time_ns()


def test_off_unless_the_variable_names_a_file__and_records_hops_carry_their_offsets(
    tmp_path: Path,
) -> None:
    assert not ack_trace.start("A", {}) and not ack_trace.ON
    trace = tmp_path / "trace.jsonl"
    assert ack_trace.start("A", {ack_trace.ENV: str(trace)}) and ack_trace.ON
    try:
        specs = [rb.RecordSpec(None, b"v", 0), rb.RecordSpec(None, b"w", 0)]
        data = rb.build_batch(specs, base_offset=7) + rb.build_batch(specs[:1], base_offset=9)
        ack_trace.records_hop("source.read", "t", 0, data)
        ack_trace.records_hop("source.read", "t", 0, b"")  # no records: no hop
        ack_trace.hop("follower.fetch_sent", "t", 0, 10, 10)
    finally:
        ack_trace.stop()
    assert not ack_trace.ON
    events = ack_trace.read(trace)
    assert [(e["c"], e["hop"], e["from"], e["to"]) for e in events] == [
        ("A", "source.read", 7, 10), ("A", "follower.fetch_sent", 10, 10)
    ]
