"""Answers of link calls are signed (linkd/core/link_auth.py, `answer_mac`),
on real daemons.

B follows A's orders- and pulls (B dials A, through a relay on the path of a
plaintext link: tests/answer_relay.py). A relay that rewrites a fetch
answer's records (their CRC computed again, so that nothing but the answer's
mac tells) gets the answer refused: B stores none of it, describe-link says
which call and why, and the link copies the genuine records once the relay
stops. A relay that strips the answers' macs (as a daemon older than them
answers) gets them refused as unsigned.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from answer_relay import FORGED, GENUINE, AnswerRelay
from harness import run_cli
from test_links_e2e import (
    LINK_FLAGS,
    attach,
    cli_json,
    high_watermarks,
    produce,
    read_all,
    wait_for,
)

WAIT_S = 90.0


@pytest.fixture
def pulled(daemon_factory: Any) -> Iterator[tuple[Any, Any, AnswerRelay]]:
    """A leads orders- to B over link ab; B dials A through the relay."""
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=LINK_FLAGS)
    for d in (a, b):
        cli_json(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    with AnswerRelay(a.bootstrap) as relay:
        yield a, b, relay


def pull_through(a: Any, b: Any, relay: AnswerRelay) -> None:
    link = cli_json(
        a.bootstrap, "create-link", "ab", "--remote", b.bootstrap,
        "--connection", "remote", "--local-bootstrap", relay.address,
    )  # fmt: skip
    assert link["connection_direction"] == "remote"
    attach(a, "topic", "orders-", "orders-", "local")
    run_cli("create-topic", "orders-p", "--partitions", "1", bootstrap=a.bootstrap)


def last_error(b: Any) -> tuple[str, str]:
    d = cli_json(b.bootstrap, "describe-link", "ab")
    return str(d["last_error_code"]), str(d["last_error"])


def stored(b: Any) -> int:
    """How many offsets B holds of orders-p, readable or not (0 while it has
    none): its high watermark, and its log's end as describe-link says it."""
    ends = [
        p["log_end_offset"]
        for p in cli_json(b.bootstrap, "describe-link", "ab")["partitions"]
        if p["topic"] == "orders-p"
    ]
    return sum(high_watermarks(b.bootstrap, "orders-p") or [0]) + sum(max(0, e) for e in ends)


def copies_genuine_records_once_the_relay_stops(a: Any, b: Any, relay: AnswerRelay) -> None:
    relay.forge = relay.strip = False
    source = high_watermarks(a.bootstrap, "orders-p")
    wait_for("orders-p on B", lambda: high_watermarks(b.bootstrap, "orders-p") == source, WAIT_S)
    copied = read_all(b.bootstrap, "orders-p")
    assert copied == read_all(a.bootstrap, "orders-p")
    values = [v for *_, v, _ in copied]
    assert values and all(v is not None and v.startswith(GENUINE) for v in values), values
    assert not any(v is not None and FORGED in v for v in values)


def test_a_fetch_answer_changed_on_the_way__is_refused__nothing_of_it_stored(
    pulled: tuple[Any, Any, AnswerRelay],
) -> None:
    a, b, relay = pulled
    relay.forge = True
    pull_through(a, b, relay)
    produce(a.bootstrap, "orders-p", 20, prefix=GENUINE.decode())

    def refused() -> bool:
        code, message = last_error(b)
        return relay.forged >= 2 and code == "LINK_AUTHENTICATION_FAILED" and (
            "ReplicaFetch" in message
        )

    wait_for("B refusing forged fetch answers", refused, WAIT_S)
    _, message = last_error(b)
    assert "link 'ab'" in message and "cluster 'A'" in message, message
    assert "the answer's proof does not match" in message, message
    # Every forged answer was refused: none of its records is stored (B's
    # checks of a copied batch pass on them: their CRC was computed again;
    # before answers were signed, B appended them, and its high watermark
    # moved over them, until comparing its batches' marks with the source's
    # told it had diverged, and it cut them and was forged again).
    assert stored(b) == 0
    assert relay.forged >= 2  # refused and asked again, in a new session
    assert "link answer refused" in b.stderr_text()
    assert "ReplicaFetch" in b.stderr_text()
    copies_genuine_records_once_the_relay_stops(a, b, relay)


def test_a_partner_that_does_not_sign_its_answers__is_refused(
    pulled: tuple[Any, Any, AnswerRelay],
) -> None:
    a, b, relay = pulled
    relay.strip = True
    pull_through(a, b, relay)
    produce(a.bootstrap, "orders-p", 20, prefix=GENUINE.decode())

    def refused() -> bool:
        code, message = last_error(b)
        return code == "LINK_AUTHENTICATION_FAILED" and "does not sign its answers" in message

    wait_for("B refusing unsigned answers", refused, WAIT_S)
    assert relay.stripped >= 1
    _, message = last_error(b)
    assert "link 'ab'" in message and "cluster 'A'" in message, message
    assert stored(b) == 0
    assert cli_json(b.bootstrap, "describe-link", "ab")["state"] != "FOLLOWING"
    copies_genuine_records_once_the_relay_stops(a, b, relay)
