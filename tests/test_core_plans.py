"""A procedure's durable plan (linkd/core/plans.py): journalled, replayed
after a restart from the records or from a snapshot, and shown by
describe-link's text form."""

from __future__ import annotations

import json

import pytest

from admin import cli
from admin.admin_client import LinkInfo
from linkd.core.cluster import ClusterState
from linkd.core.journal import decode, encode
from linkd.core.plans import REVERSE, Plan, PlanNamespace, PlanStep
from linkd.core.procedures import REVERSE_STEPS


def _plan() -> Plan:
    return Plan(
        REVERSE, "ab", "id-ab", "B",
        (
            PlanNamespace("topic", "orders-", "orders-"),
            PlanNamespace("group", "app-", "app-", True),
        ),
        30_000, 5,
        (PlanStep(REVERSE_STEPS[0], True, "link is FOLLOWING", 0),),
    )


def test_a_plan_is_replayed_from_its_records_and_from_a_snapshot() -> None:
    state = ClusterState("A")
    records = state.plans.put(_plan())
    step = PlanStep(REVERSE_STEPS[1], True, "reserved", 3)
    later = _plan().with_step(step)
    records += state.plans.put(later)
    stored = [json.loads(json.dumps(encode(r))) for r in records]
    replayed = ClusterState("A")
    for obj in stored:
        replayed.apply_record(decode(obj))
    assert replayed.plans.get("ab") == later
    assert later.next_step(REVERSE_STEPS) == REVERSE_STEPS[2]
    restored = ClusterState("A")
    restored.restore(json.loads(json.dumps(replayed.snapshot())))
    assert restored.plans.get("ab") == later
    # The plan's end is journalled too.
    end = replayed.plans.end("ab")
    assert replayed.plans.get("ab") is None and replayed.plans.end("ab") == []
    again = ClusterState("A")
    for obj in [*stored, encode(end[0])]:
        again.apply_record(decode(obj))
    assert again.plans.get("ab") is None


def test_a_failed_step_is_replaced_by_its_retry() -> None:
    failed = _plan().with_step(PlanStep(REVERSE_STEPS[1], False, "LINK_UNREACHABLE", 1))
    assert failed.next_step(REVERSE_STEPS) == REVERSE_STEPS[1]
    retried = failed.with_step(PlanStep(REVERSE_STEPS[1], True, "reserved", 2))
    assert [s.name for s in retried.steps] == list(REVERSE_STEPS[:2])
    assert retried.next_step(REVERSE_STEPS) == REVERSE_STEPS[2]


def test_describe_link_text_shows_a_plan_in_progress(capsys: pytest.CaptureFixture[str]) -> None:
    link = LinkInfo(
        "ab", "id-ab", "A", "B", "b:9092", "ASYNC", "local", "FOLLOWING", 0, 1, [], [], [],
        procedure={
            "procedure": "reverse",
            "remote_cluster_id": "B",
            "namespaces": [
                {"type": "topic", "local_prefix": "orders-", "remote_prefix": "orders-"}
            ],
            "steps": [{"name": "detach-mappings", "ok": False, "result": "LINK_UNREACHABLE: x",
                       "duration_ms": 4}],
            "next_step": "detach-mappings",
            "started_at_ms": 5,
            "restarts": 0,
        },
    )
    cli._print_link(link)
    out = capsys.readouterr().out
    shown = "procedure in progress: reverse of topic 'orders-' to B, next step detach-mappings"
    assert shown in out
    assert "detach-mappings: FAILED: LINK_UNREACHABLE: x" in out


def test_deleting_the_link_ends_its_plan() -> None:
    from linkd.core import link_admin

    state = ClusterState("A")
    config = state.links.new_config("ab", "id-ab", "B", "b:1", "", "local_dials", "", 1000)
    state.links.store(config, 1000)
    state.plans.put(_plan())
    effects = link_admin.delete_link(state, "ab", False, 2000)
    assert state.plans.get("ab") is None
    records = [r for e in effects for r in getattr(e, "records", ())]
    assert any(r.TYPE == "procedure_plan" for r in records)
