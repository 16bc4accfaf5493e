"""What one push costs the link session and its wire form, in this process:
the sender's encoding and signature, the receiver's decoding and check.

    python bench/link_session.py [--partitions 3] [--partition-kib 1024] [--repeat 5]

Two ways side by side, interleaved, the median of --repeat runs of --calls
calls each:
- message: the push built as one protobuf message with its records inside
  (`link_codec.push_pb`, encoded; decoded with `FromString` and
  `link_codec.push_of`), as the link sent it before records crossed as bytes;
- bytes: the push written around its records (`link_codec.push_bytes`; read
  with `link_codec.push_of_bytes`), as it is sent now.
Both are signed over the bytes sent (`ClientSession.metadata_of_body`: one
SHA-256 pass and an HMAC of the digest) and checked over the bytes received
(one SHA-256 pass, `LinkSessions.verify`).

A fetch answer of the same records, both ways, interleaved with the rest:
- unsigned: the callee's encoding (`link_codec.fetch_answer_bytes`) and the
  caller's decoding (`link_codec.fetch_answer_of_bytes`), as answers crossed
  before they were signed;
- signed: the same, with the callee's answer mac over the bytes it sends
  (`link_sessions.answer_metadata`) and the caller's check over the bytes it
  received (`ClientSession.check_answer`), as they cross now.

Also prints what one pass of each
candidate MAC costs over the same bytes (SHA-256 with an HMAC of the digest,
HMAC-SHA256 over the bytes, keyed BLAKE2b) and a plain copy, for reference.
The records are opaque bytes here: no storage, no gRPC, no record checks.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "proto" / "gen")]

from ccr.v1 import replication_pb2  # noqa: E402
from linkd import link_codec as codec  # noqa: E402
from linkd import link_sessions as sessions  # noqa: E402
from linkd.core import link_auth as auth  # noqa: E402
from linkd.core import link_rounds as rounds  # noqa: E402

NOW = 1_000_000


def opened() -> tuple[sessions.ClientSession, auth.LinkSessions]:
    """A session between A (the caller) and B, as the core opens it."""
    key = hashlib.sha256(b"bench link key").digest()
    callee = auth.LinkSessions("B")
    nonce = b"n" * auth.NONCE_BYTES
    callee.challenge(nonce, NOW)
    opening = auth.open_request("L1", "ab", "A", "B", nonce, b"c" * 32, key, "", False)
    got = callee.open(opening.request, auth.KnownLink("A", key), ("",), NOW, "s1")
    session_key = auth.opened_session_key(opening, "s1", got.proof)
    identity = sessions.LinkIdentity("L1", "ab", "A", "B", key, "")
    return sessions.ClientSession(auth.CallSigner("s1", session_key), "b:1", identity), callee


def a_push(partitions: int, kib: int) -> rounds.Push:
    parts = [
        rounds.FetchedPartition(
            f"bench-{i}", i, high_watermark=10**6, log_end_offset=10**6,
            records=bytes([i]) * (kib * 1024), size_bytes=kib * 1024,
        )
        for i in range(partitions)
    ]
    return rounds.Push("L1", data=rounds.FetchAnswer(parts), request_sent_ms=NOW)


def timed(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--partition-kib", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    push = a_push(args.partitions, args.partition_kib)
    client, callee = opened()
    size = len(codec.push_bytes(push))

    def send_message() -> tuple[bytes, object]:
        body = codec.push_pb(push).SerializeToString(deterministic=True)
        return body, client.metadata_of_body("ReplicaPush", body)

    def send_bytes() -> tuple[bytes, object]:
        body = codec.push_bytes(push)
        return body, client.metadata_of_body("ReplicaPush", body)

    def receiver(decode: Callable[[bytes], rounds.Push]) -> Callable[[], object]:
        body = codec.push_bytes(push)
        signed = auth.request_digest(body)

        def receive() -> object:
            seq, mac = client.signer.sign("ReplicaPush", signed)  # the sender's (not timed: tiny)
            got = decode(body)
            # What the receiving shell checks: the MAC over the bytes received.
            callee.verify("s1", "L1", "ReplicaPush", seq, auth.request_digest(body), mac, NOW)
            return got

        return receive

    def decode_message(body: bytes) -> rounds.Push:
        return codec.push_of(replication_pb2.ReplicaPushRequest.FromString(body))

    def decode_bytes(body: bytes) -> rounds.Push:
        return codec.push_of_bytes(body)[1]

    answer = push.data
    assert answer is not None
    answer_body = codec.fetch_answer_bytes(answer)
    fetch_body = b"a fetch request"
    callee_key = callee.answer_key("s1")
    assert callee_key is not None

    def answer_unsigned_send() -> object:
        return codec.fetch_answer_bytes(answer)

    def answer_signed_send() -> object:
        body = codec.fetch_answer_bytes(answer)
        return body, sessions.answer_metadata(callee_key, "ReplicaFetch", 7, body)

    def answer_unsigned_receive() -> object:
        return codec.fetch_answer_of_bytes(answer_body)

    signed_call = client.sign("ReplicaFetch", fetch_body)
    answer_trailer = sessions.answer_metadata(
        callee_key, "ReplicaFetch", signed_call.seq, answer_body
    )

    def answer_signed_receive() -> object:
        client.check_answer(signed_call, answer_body, answer_trailer)
        return codec.fetch_answer_of_bytes(answer_body)

    key = b"k" * 32
    body = codec.push_bytes(push)
    steps: dict[str, Callable[[], object]] = {
        "send, message": send_message,
        "send, bytes": send_bytes,
        "receive, message": receiver(decode_message),
        "receive, bytes": receiver(decode_bytes),
        "encode only, message": lambda: codec.push_pb(push).SerializeToString(deterministic=True),
        "encode only, bytes": lambda: codec.push_bytes(push),
        "decode only, message": lambda: decode_message(body),
        "decode only, bytes": lambda: decode_bytes(body),
        "answer send, unsigned": answer_unsigned_send,
        "answer send, signed": answer_signed_send,
        "answer receive, unsigned": answer_unsigned_receive,
        "answer receive, checked": answer_signed_receive,
        "SHA-256 + HMAC of digest": lambda: auth.call_mac(
            key, "ReplicaPush", 1, auth.request_digest(body)
        ),
        "HMAC-SHA256 over the bytes": lambda: hmac.digest(key, body, "sha256"),
        "keyed BLAKE2b-256": lambda: hashlib.blake2b(body, key=key, digest_size=32).digest(),
        "a copy (bytes(bytearray))": lambda: bytes(bytearray(body)),
    }
    runs: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeat):
        for name, fn in steps.items():
            runs[name].append(timed(fn, args.calls))
    print(
        f"push (and fetch answer) of {args.partitions} partitions x {args.partition_kib} KiB "
        f"= {size:,} bytes; median of {args.repeat} runs of {args.calls} calls"
    )
    print(f"{'step':28} {'ms/call':>9} {'MB/s':>9}")
    for name, times in runs.items():
        t = statistics.median(times)
        print(f"{name:28} {t * 1000:>9.3f} {size / t / 1e6:>9,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
