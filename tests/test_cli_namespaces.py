"""Namespaces end to end: `ccr-admin` against a real daemon (spec section 2)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from admin import AdminClient, CcrError
from tests.harness import Daemon, run_cli


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}; stderr: {result.stderr}"
    return result.stdout


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(_ok(result))


def _one_line_error(result: subprocess.CompletedProcess[str], code: str) -> str:
    """The failure is exit 1 and one 'error: CODE: ...' line on stderr."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {code}: "), result.stderr
    return lines[0]


def test_namespace_lifecycle__reservation_blocks_clients__and_survives_kill9(
    daemon: Daemon,
) -> None:
    b = daemon.bootstrap
    out = _ok(run_cli("create-namespace", "--type", "topic", "--prefix", "orders-", bootstrap=b))
    assert out.strip() == "created topic namespace 'orders-'"
    created = _json(
        run_cli(
            "create-namespace",
            "--type",
            "group",
            "--prefix",
            "audit-",
            "--reserved",
            "--json",
            bootstrap=b,
        )
    )
    assert created == {"type": "group", "prefix": "audit-", "reserved": True, "attachments": []}
    _ok(run_cli("create-namespace", "--type", "topic", "--prefix", "", bootstrap=b))
    _one_line_error(
        run_cli("create-namespace", "--type", "topic", "--prefix", "orders-", bootstrap=b),
        "NAMESPACE_EXISTS",
    )
    _one_line_error(
        run_cli("create-namespace", "--type", "topic", "--prefix", "bad prefix", bootstrap=b),
        "INVALID_NAMESPACE",
    )

    listed = _json(run_cli("list-namespaces", "--json", bootstrap=b))
    assert [(n["type"], n["prefix"], n["reserved"]) for n in listed] == [
        ("topic", "", False),
        ("topic", "orders-", False),
        ("group", "audit-", True),
    ]
    assert [
        n["prefix"]
        for n in _json(run_cli("list-namespaces", "--type", "group", "--json", bootstrap=b))
    ] == ["audit-"]
    table = _ok(run_cli("list-namespaces", bootstrap=b))
    assert table.splitlines()[0].split() == ["TYPE", "PREFIX", "RESERVED", "ATTACHMENTS"]

    _ok(run_cli("create-topic", "orders-eu", "--partitions", "2", bootstrap=b))
    _ok(run_cli("create-topic", "clicks", bootstrap=b))
    described = _json(
        run_cli(
            "describe-namespace", "--type", "topic", "--prefix", "orders-", "--json", bootstrap=b
        )
    )
    assert described == {
        "type": "topic",
        "prefix": "orders-",
        "reserved": False,
        "attachments": [],
        "resources": ["orders-eu"],
    }
    human = _ok(
        run_cli("describe-namespace", "--type", "topic", "--prefix", "orders-", bootstrap=b)
    )
    assert "topic namespace 'orders-'" in human and "orders-eu" in human

    # Reserve: clients may no longer produce, create or delete in it.
    reserved = _json(
        run_cli(
            "set-reserved",
            "--type",
            "topic",
            "--prefix",
            "orders-",
            "--reserved",
            "true",
            "--json",
            bootstrap=b,
        )
    )
    assert reserved["reserved"] is True
    line = _one_line_error(
        run_cli("produce", "orders-eu", input="refused\n", bootstrap=b), "RESERVED_NAMESPACE"
    )
    assert "topic namespace 'orders-'" in line
    _one_line_error(run_cli("create-topic", "orders-us", bootstrap=b), "RESERVED_NAMESPACE")
    _one_line_error(run_cli("delete-topic", "orders-eu", bootstrap=b), "RESERVED_NAMESPACE")
    # Topics outside it are not affected.
    _ok(run_cli("produce", "clicks", input="fine\n", bootstrap=b))

    # A consumer group in a reserved group namespace cannot commit.
    _ok(run_cli("produce", "clicks", input="one more\n", bootstrap=b))
    line = _one_line_error(
        run_cli(
            "consume",
            "clicks",
            "--from-beginning",
            "--group",
            "audit-1",
            "--max-messages",
            "1",
            bootstrap=b,
        ),
        "RESERVED_NAMESPACE",
    )
    assert "group namespace 'audit-'" in line

    # Namespaces and their reservation are durable.
    daemon.kill9()
    daemon.start()
    daemon.wait_ready()
    after = _json(run_cli("list-namespaces", "--json", bootstrap=b))
    assert after == [listed[0], {**listed[1], "reserved": True}, listed[2]]
    _one_line_error(
        run_cli("produce", "orders-eu", input="still refused\n", bootstrap=b),
        "RESERVED_NAMESPACE",
    )

    # Clear the reservation: producing works again.
    out = _ok(
        run_cli(
            "set-reserved",
            "--type",
            "topic",
            "--prefix",
            "orders-",
            "--reserved",
            "false",
            bootstrap=b,
        )
    )
    assert out.strip() == "topic namespace 'orders-' is not reserved"
    _ok(run_cli("produce", "orders-eu", input="accepted\n", bootstrap=b))
    consumed = _ok(
        run_cli(
            "consume",
            "orders-eu",
            "--from-beginning",
            "--max-messages",
            "1",
            "--timeout-ms",
            "10000",
            bootstrap=b,
        )
    )
    assert consumed.split() == ["accepted"]

    # Delete.
    assert _json(
        run_cli("delete-namespace", "--type", "topic", "--prefix", "orders-", "--json", bootstrap=b)
    ) == {"deleted": {"type": "topic", "prefix": "orders-"}}
    _one_line_error(
        run_cli("describe-namespace", "--type", "topic", "--prefix", "orders-", bootstrap=b),
        "UNKNOWN_NAMESPACE",
    )
    _one_line_error(
        run_cli("delete-namespace", "--type", "topic", "--prefix", "orders-", bootstrap=b),
        "UNKNOWN_NAMESPACE",
    )
    daemon.restart(kill=True)
    assert [n["prefix"] for n in _json(run_cli("list-namespaces", "--json", bootstrap=b))] == [
        "",
        "audit-",
    ]


def test_namespace_cli_usage_errors(daemon: Daemon) -> None:
    b = daemon.bootstrap
    bad_type = run_cli("create-namespace", "--type", "cluster", "--prefix", "x", bootstrap=b)
    assert bad_type.returncode == 2 and "invalid choice" in bad_type.stderr
    bad_bool = run_cli(
        "set-reserved", "--type", "topic", "--prefix", "x", "--reserved", "maybe", bootstrap=b
    )
    assert bad_bool.returncode == 2 and "expected true or false" in bad_bool.stderr
    _one_line_error(
        run_cli(
            "set-reserved", "--type", "topic", "--prefix", "x", "--reserved", "true", bootstrap=b
        ),
        "UNKNOWN_NAMESPACE",
    )


def test_client_library__namespaces(daemon: Daemon) -> None:
    with AdminClient(daemon.bootstrap) as admin:
        ns = admin.create_namespace("TOPIC", "t-", reserved=True)
        assert (ns.type, ns.prefix, ns.reserved, ns.attachments) == ("topic", "t-", True, [])
        cleared = admin.set_reserved("topic", "t-", False)
        assert cleared.namespace.reserved is False and cleared.aborted_transactions == []
        admin.create_namespace("principal", "User:svc-")
        assert [(n.type, n.prefix) for n in admin.list_namespaces()] == [
            ("topic", "t-"),
            ("principal", "User:svc-"),
        ]
        assert admin.list_namespaces("group") == []
        d = admin.describe_namespace("principal", "User:svc-")
        assert d.namespace.prefix == "User:svc-" and d.resources == []
        admin.delete_namespace("principal", "User:svc-")
        try:
            admin.delete_namespace("principal", "User:svc-")
        except CcrError as exc:
            assert exc.code == "UNKNOWN_NAMESPACE"
            assert "principal namespace 'User:svc-'" in exc.message
        else:
            raise AssertionError("deleting a deleted namespace succeeded")
        try:
            admin.create_namespace("cluster", "x")
        except ValueError as exc:
            assert "topic, group, principal" in str(exc)
        else:
            raise AssertionError("an unknown namespace type was accepted")
