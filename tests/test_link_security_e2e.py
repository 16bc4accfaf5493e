"""Links that cannot be forged (issue 15), on real daemons.

Every call between two clusters runs in a link session (linkd/core/link_auth.py).
These tests act as the attacker of the issue: anonymous or forged
replication calls, a stolen link id, a handshake claiming an existing link, an
impostor at the remote's address; and as the operator: credentials from a
file, rotated with alter-link while the link keeps FOLLOWING, never on the
wire in an answer nor in the data directories.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from certs import make_certs
from harness import run_cli
from tap_proxy import TapProxy
from test_links_e2e import (
    LINK_FLAGS,
    attach,
    cli_json,
    high_watermarks,
    produce,
    read_all,
    wait_for,
)

from ccr.v1 import replication_pb2, replication_pb2_grpc

OLD, NEW = "old-link-secret-7f3a", "new-link-secret-9c41"


def following(d: Any) -> bool:
    return bool(cli_json(d.bootstrap, "describe-link", "ab")["state"] == "FOLLOWING")


def caught_up(a: Any, b: Any, topic: str) -> None:
    source = high_watermarks(a.bootstrap, topic)
    wait_for(f"{topic} on B", lambda: high_watermarks(b.bootstrap, topic) == source)


@pytest.fixture
def secured(daemon_factory: Any, tmp_path: Path) -> Iterator[tuple[Any, Any, Path]]:
    """B requires link credentials (a file); A leads orders- to B over link ab
    created with them; orders-x holds 40 records on both."""
    required = tmp_path / "b-link-credentials"
    required.write_text(f"{OLD}\n")
    mine = tmp_path / "a-credentials-for-b"
    mine.write_text(f"{OLD}\n")
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=[*LINK_FLAGS, "--link-credentials-file", str(required)])
    for d in (a, b):
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    yield a, b, required


def link(a: Any, b_address: str, credentials: Path) -> None:
    cli_json(
        a.bootstrap, "create-link", "ab", "--remote", b_address,
        "--remote-credentials-file", str(credentials),
    )
    attach(a, "topic", "orders-", "orders-", "local")
    run_cli("create-topic", "orders-x", "--partitions", "2", bootstrap=a.bootstrap)


def refused(call: Callable[[], Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, info.value.details()
    return info.value


def test_anonymous_and_forged_replication_calls_are_refused_and_change_nothing(
    secured: tuple[Any, Any, Path], tmp_path: Path
) -> None:
    a, b, required = secured
    link(a, b.bootstrap, required)
    produce(a.bootstrap, "orders-x", 40)
    caught_up(a, b, "orders-x")
    wait_for("B following", lambda: following(b))
    before = read_all(b.bootstrap, "orders-x")
    link_id = cli_json(b.bootstrap, "describe-link", "ab")["link_id"]  # not a secret

    with grpc.insecure_channel(b.bootstrap) as channel:
        stub = replication_pb2_grpc.ReplicationStub(channel)
        forged = replication_pb2.ReplicaPushRequest(
            link_id=link_id,
            data=replication_pb2.ReplicaFetchResponse(),
        )
        guessed = (("ccr-link-session", "s"), ("ccr-link-seq", "0"), ("ccr-link-mac", "00" * 32))
        view = replication_pb2.LinkConfigView(
            name="ab", link_id=link_id, local_cluster_id="A", remote_cluster_id="B",
            connection_direction="local_dials",
            fields=[replication_pb2.VersionedField(
                name="local_bootstrap", value="127.0.0.1:1",
                version=replication_pb2.Version(physical_ms=2**50, logical=0, node="A"),
            )],
        )
        calls: list[Callable[[], Any]] = [
            lambda: stub.ReplicaPush(forged, timeout=10),
            lambda: stub.ReplicaPush(forged, metadata=guessed, timeout=10),
            lambda: stub.ReplicaFetch(
                replication_pb2.ReplicaFetchRequest(link_id=link_id), timeout=10
            ),
            lambda: stub.RemoveLink(replication_pb2.RemoveLinkRequest(link_id=link_id), timeout=10),
            lambda: stub.PromoteNamespaces(
                replication_pb2.PromoteNamespacesRequest(link_id=link_id), timeout=10
            ),
            lambda: stub.Handshake(replication_pb2.HandshakeRequest(config=view), timeout=10),
            lambda: stub.DescribePartitions(
                replication_pb2.DescribePartitionsRequest(link_id=link_id, prefix="orders-"),
                timeout=10,
            ),
            lambda: stub.ListSourceTopics(
                replication_pb2.ListSourceTopicsRequest(link_id=link_id, prefix="orders-"),
                timeout=10,
            ),
            lambda: stub.FetchGroupOffsets(
                replication_pb2.FetchGroupOffsetsRequest(link_id=link_id, prefix="orders-"),
                timeout=10,
            ),
        ]
        for attempt in calls:
            error = refused(attempt)
            assert "session" in (error.details() or "")
        # Claiming the link with a guessed key (and without B's credentials).
        challenge = stub.Challenge(replication_pb2.ChallengeRequest(), timeout=10)
        assert challenge.cluster_id == "B" and challenge.credentials_required
        error = refused(lambda: stub.OpenSession(
            replication_pb2.OpenSessionRequest(
                link_id=link_id, link_name="ab", caller_cluster_id="A", callee_cluster_id="B",
                server_nonce=challenge.nonce, client_nonce=b"n" * 32, proof=b"p" * 32,
            ),
            timeout=10,
        ))
        assert "could not prove" in (error.details() or "")

    # Nothing changed on B: same records, same link, same address to reach A.
    assert read_all(b.bootstrap, "orders-x") == before
    described = cli_json(b.bootstrap, "describe-link", "ab")
    assert described["link_id"] == link_id and described["state"] == "FOLLOWING"
    produce(a.bootstrap, "orders-x", 10, "after")
    caught_up(a, b, "orders-x")
    assert read_all(b.bootstrap, "orders-x") == read_all(a.bootstrap, "orders-x")
    log = b.stderr_path.read_text()
    assert "link call refused" in log and OLD not in log


def test_credentials_rotate_with_the_link_following_and_never_cross_in_an_answer(
    secured: tuple[Any, Any, Path], tmp_path: Path
) -> None:
    a, b, required = secured
    with TapProxy(b.bootstrap) as tap:
        link(a, tap.address, required)
        produce(a.bootstrap, "orders-x", 30)
        caught_up(a, b, "orders-x")
        wait_for("A and B following", lambda: following(a) and following(b))

        # Rotation: B accepts both, A switches, B drops the old one.
        samples: list[tuple[str, str]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append(
                    tuple(cli_json(d.bootstrap, "describe-link", "ab")["state"] for d in (a, b))
                )
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            required.write_text(f"{OLD}\n{NEW}\n")
            new_file = tmp_path / "a-new-credentials"
            new_file.write_text(f"{NEW}\n")
            wrong = tmp_path / "wrong"
            wrong.write_text("not-it\n")
            bad = run_cli("alter-link", "ab", "--remote-credentials-file", str(wrong),
                          bootstrap=a.bootstrap)
            assert bad.returncode == 1 and "LINK_AUTHENTICATION_FAILED" in bad.stderr
            assert "unchanged" in bad.stderr
            cli_json(a.bootstrap, "alter-link", "ab", "--remote-credentials-file", str(new_file))
            produce(a.bootstrap, "orders-x", 20, "mid")
            caught_up(a, b, "orders-x")
            required.write_text(f"{NEW}\n")
            produce(a.bootstrap, "orders-x", 20, "late")
            caught_up(a, b, "orders-x")
        finally:
            stop.set()
            sampler.join(timeout=30)
        assert samples and all(s == ("FOLLOWING", "FOLLOWING") for s in samples), samples

        # The old credential no longer opens a session.
        old_file = tmp_path / "a-old-credentials"
        old_file.write_text(f"{OLD}\n")
        stale = run_cli("alter-link", "ab", "--remote-credentials-file", str(old_file),
                        bootstrap=a.bootstrap)
        assert stale.returncode == 1 and "LINK_AUTHENTICATION_FAILED" in stale.stderr

        assert read_all(b.bootstrap, "orders-x") == read_all(a.bootstrap, "orders-x")
        cli_json(a.bootstrap, "delete-link", "ab")
        wait_for("B forgot the link", lambda: "ab" not in run_cli(
            "list-links", "--json", bootstrap=b.bootstrap).stdout)
        requests, answers = tap.seen()
    # The link's life went through the tap: A leads and dials, so it pushes
    # the records (in requests) and B answers with its positions.
    assert b"late-19" in requests and len(answers) > 2_000
    for secret in (OLD, NEW):
        assert secret.encode() not in answers
        assert secret.encode() not in requests  # proved, never sent
    for d in (a, b):
        for path in d.data_dir.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert OLD.encode() not in data and NEW.encode() not in data, path


def test_an_impostor_at_a_new_address_is_refused_and_nothing_changes(
    secured: tuple[Any, Any, Path], daemon_factory: Any
) -> None:
    a, b, required = secured
    link(a, b.bootstrap, required)
    wait_for("A following", lambda: following(a))
    c = daemon_factory("C", extra_args=LINK_FLAGS)
    moved = run_cli("alter-link", "ab", "--remote-bootstrap", c.bootstrap, bootstrap=a.bootstrap)
    assert moved.returncode == 1 and "LINK_AUTHENTICATION_FAILED" in moved.stderr
    assert "'C'" in moved.stderr
    assert cli_json(a.bootstrap, "describe-link", "ab")["remote_bootstrap"] == b.bootstrap
    # C, a cluster of its own, cannot take the link over by claiming to be B either.
    produce(a.bootstrap, "orders-x", 5)
    caught_up(a, b, "orders-x")


def test_a_link_between_mtls_listeners_replicates_over_tls(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """Both gRPC listeners are SSL with client certificates required: the link
    dials SSL://, checks the partner's certificate with --link-tls-ca and
    presents its own; records cross encrypted (a tap sees none of them)."""
    certs = make_certs(tmp_path / "certs")
    tls = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
           "--tls-client-ca", str(certs.ca), "--link-tls-ca", str(certs.ca)]
    client = {"security.protocol": "SSL", "ssl.ca.location": str(certs.ca),
              "ssl.certificate.location": str(certs.client_cert),
              "ssl.key.location": str(certs.client_key)}
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in client.items()))
    a = daemon_factory("A", extra_args=[*LINK_FLAGS, *tls], listen_protocol="SSL",
                       client_config=client)
    b = daemon_factory("B", extra_args=[*LINK_FLAGS, *tls], listen_protocol="SSL",
                       client_config=client)

    def admin(d: Any, *args: str) -> Any:
        return cli_json(d.bootstrap, "--command-config", str(props), *args)

    for d in (a, b):
        admin(d, "create-namespace", "--type", "topic", "--prefix", "orders-")
    with TapProxy(b.bootstrap) as tap:
        plain = run_cli("--command-config", str(props), "create-link", "ab", "--remote",
                        tap.address, bootstrap=a.bootstrap)
        assert plain.returncode == 1 and "LINK_UNREACHABLE" in plain.stderr, plain.stderr
        admin(a, "create-link", "ab", "--remote", f"SSL://{tap.address}")
        admin(a, "attach-namespace", "--link", "ab", "--type", "topic", "--local-prefix",
              "orders-", "--remote-prefix", "orders-", "--leader", "local")
        admin(a, "create-topic", "orders-x", "--partitions", "1")
        produce_to = run_cli("--command-config", str(props), "produce", "orders-x",
                             input="".join(f"secret-record-{i}\n" for i in range(20)),
                             bootstrap=a.bootstrap)
        assert produce_to.returncode == 0, produce_to.stderr
        def on_b() -> list[int] | None:
            # None until the link's round has created orders-x on B.
            found = run_cli("--command-config", str(props), "describe-topic", "orders-x",
                            "--json", bootstrap=b.bootstrap)
            if found.returncode == 1 and "UNKNOWN_TOPIC" in found.stderr:
                return None
            assert found.returncode == 0, found.stderr
            return [p["high_watermark"] for p in json.loads(found.stdout)["partitions"]]

        wait_for("orders-x on B", lambda: on_b() == [20])
        wait_for("B following", lambda: admin(b, "describe-link", "ab")["state"] == "FOLLOWING")
        requests, answers = tap.seen()
    assert len(requests) > 1_000
    assert b"secret-record-" not in requests and b"secret-record-" not in answers


def test_a_credentials_file_gone_refuses_new_sessions_by_name(
    secured: tuple[Any, Any, Path],
) -> None:
    """The operator removes B's --link-credentials-file: B accepts no new
    session (it never falls back to open) and says why; restored, the link
    carries on."""
    a, b, required = secured
    link(a, b.bootstrap, required)
    wait_for("A following", lambda: following(a))
    required.unlink()
    stale = run_cli("alter-link", "ab", "--remote-credentials-file", str(a.data_dir.parent.parent
                    / "a-credentials-for-b"), bootstrap=a.bootstrap)
    assert stale.returncode == 1 and "cannot read its --link-credentials-file" in stale.stderr
    required.write_text(f"{OLD}\n")  # restored: the link carries on
    produce(a.bootstrap, "orders-x", 5)
    caught_up(a, b, "orders-x")


def test_a_credential_removed_from_the_file_ends_a_busy_links_sessions__and_says_so(
    secured: tuple[Any, Any, Path], tmp_path: Path
) -> None:
    """Issue 29 finding 6b: a link kept busy never idles its sessions out; a
    credential removed from B's file must still end them, at their next call,
    and describe-link on both sides must say what is wrong."""
    a, b, required = secured
    link(a, b.bootstrap, required)
    produce(a.bootstrap, "orders-x", 20)
    caught_up(a, b, "orders-x")
    wait_for("A and B following", lambda: following(a) and following(b))
    stop = threading.Event()

    def busy() -> None:  # the link never idles: a record every 50 ms
        while not stop.is_set():
            produce(a.bootstrap, "orders-x", 1, "busy")
            stop.wait(0.05)

    writer = threading.Thread(target=busy, daemon=True)
    writer.start()
    try:
        required.write_text(f"{NEW}\n")  # A still proves OLD
        wait_for(
            "B says the link's sessions ran on a revoked credential",
            lambda: cli_json(b.bootstrap, "describe-link", "ab")["credential_problem"].startswith(
                "revoked: "
            ),
            timeout_s=30,
        )
        problem = cli_json(b.bootstrap, "describe-link", "ab")["credential_problem"]
        assert "cluster 'A'" in problem and "alter-link ab --remote-credentials-file" in problem
        assert OLD not in problem and NEW not in problem
        wait_for("A is refused and says why", lambda: (
            "refuses this side's link sessions" in cli_json(
                a.bootstrap, "describe-link", "ab")["credential_problem"]
        ), timeout_s=30)  # fmt: skip
        wait_for("A no longer FOLLOWING", lambda: not following(a), timeout_s=30)
        # Nothing more reaches B on the revoked credential.
        frozen = high_watermarks(b.bootstrap, "orders-x")
        time.sleep(1.5)
        assert high_watermarks(b.bootstrap, "orders-x") == frozen
        assert high_watermarks(a.bootstrap, "orders-x") != frozen
        human = run_cli("describe-link", "ab", bootstrap=b.bootstrap).stdout
        assert "credential: revoked: " in human

        # A's operator switches to the accepted credential: the link carries on.
        new_file = tmp_path / "a-new-credentials"
        new_file.write_text(f"{NEW}\n")
        cli_json(a.bootstrap, "alter-link", "ab", "--remote-credentials-file", str(new_file))
    finally:
        stop.set()
        writer.join(timeout=30)
    caught_up(a, b, "orders-x")
    wait_for("both sides clear", lambda: all(
        cli_json(d.bootstrap, "describe-link", "ab")["credential_problem"] == "" for d in (a, b)
    ))  # fmt: skip
