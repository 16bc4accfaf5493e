"""Gaps a link cannot fill, on real daemons through ccr-admin.

A leads orders- to B over link ab. B copies some records, then B's daemon
stops (the link is cut); A takes more records and its retention deletes
all but its newest segment (whole segments, as Kafka's retention: one batch
a segment here, `internal.segment.bytes`, and `retention.bytes` 1 keeps the
newest); B starts again behind A's log start. Under
gap.policy continue (the default) B records the gap in its provenance,
describe-link lists it with its exact range and time, the metrics count it,
the log warns of it, and B's log starts again at A's log start. Under
gap.policy stop (alter-link on A, converging to B) the partition stops and
says why until `ccr-admin resume-partition` lets it go on.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from harness import Daemon, free_port, run_cli
from prometheus_client.parser import text_string_to_metric_families

from admin import AdminClient
from admin.errors import CcrError

WAIT_S = 60.0
LINK_FLAGS = ["--link-session-timeout-ms", "3000"]
TOPIC = "orders-r"


def cli(bootstrap: str, *args: str, input: str | None = None) -> Any:
    result = run_cli(*args, "--json", bootstrap=bootstrap, input=input)
    assert result.returncode == 0, f"{args}: {result.stderr}"
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return lines[0] if len(lines) == 1 else lines


def poll(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = check()
        except CcrError as exc:
            if exc.code != "UNKNOWN_TOPIC":
                raise
            got = None  # the follower's topic comes with the link's next round
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def produce(a: Daemon, n: int, tag: str) -> None:
    """n records, one batch each (one produce call per line is not
    guaranteed; the offsets are read back, never assumed)."""
    lines = "".join(f"{tag}-{i}\n" for i in range(n))
    result = run_cli("produce", TOPIC, bootstrap=a.bootstrap, input=lines)
    assert result.returncode == 0, result.stderr


def partition0(d: Daemon) -> dict[str, int]:
    """Offsets of the topic's partition 0 (through the client library: the
    waits poll it often)."""
    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    try:
        p = admin.describe_topic(TOPIC).partitions[0]
        return {
            "log_start_offset": p.log_start_offset,
            "high_watermark": p.high_watermark,
            "log_end_offset": p.log_end_offset,
        }
    finally:
        admin.close()


def outage(a: Daemon, b: Daemon, tag: str) -> tuple[int, int]:
    """B copies everything, stops; A takes records (several batches) and its
    retention deletes all but the newest; B starts. Returns (B's log end
    before, A's log start after)."""
    source_hw = partition0(a)["high_watermark"]
    poll("B caught up", lambda: partition0(b)["high_watermark"] == source_hw)
    before = partition0(b)["log_end_offset"]
    b.terminate()
    cli(a.bootstrap, "alter-topic-config", TOPIC, "--set", "internal.segment.bytes=1")
    for i in range(4):
        produce(a, 3, f"{tag}{i}")
    cli(a.bootstrap, "alter-topic-config", TOPIC, "--set", "retention.bytes=1")
    start = poll(
        "A's retention past B's position",
        lambda: (s := partition0(a)["log_start_offset"]) > before and s,
    )
    assert start < partition0(a)["log_end_offset"]  # the newest segment stays
    cli(a.bootstrap, "alter-topic-config", TOPIC, "--delete", "retention.bytes")
    b.start()
    b.wait_ready()
    return before, start


def link(d: Daemon) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": d.bootstrap})
    try:
        return admin.describe_link("ab").to_dict()
    finally:
        admin.close()


def gaps(b: Daemon) -> list[dict[str, Any]]:
    return list(link(b)["gaps"])


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_gap__continue_records_it__stop_waits_for_resume_partition(
    daemon_factory: Callable[..., Daemon],
) -> None:
    metrics_b = f"127.0.0.1:{free_port()}"
    a = daemon_factory("A", extra_args=LINK_FLAGS)
    b = daemon_factory("B", extra_args=[*LINK_FLAGS, "--metrics-listen", metrics_b])
    for d in (a, b):
        cli(d.bootstrap, "create-namespace", "--type", "topic", "--prefix", "orders-")
    cli(a.bootstrap, "create-link", "ab", "--remote", b.bootstrap)
    cli(
        a.bootstrap, "attach-namespace", "--link", "ab", "--type", "topic",
        "--local-prefix", "orders-", "--remote-prefix", "orders-", "--leader", "local",
    )
    cli(a.bootstrap, "create-topic", TOPIC, "--partitions", "1")
    produce(a, 5, "first")
    assert cli(b.bootstrap, "describe-link", "ab")["gap_policy"] == "continue"

    # -- gap.policy continue --------------------------------------------------------
    before, start = outage(a, b, "cut1")
    restarted_ms = int(time.time() * 1000)
    poll("the gap on B", lambda: gaps(b))
    [gap] = cli(b.bootstrap, "describe-link", "ab")["gaps"]  # as the operator sees it
    assert (gap["topic"], gap["partition"]) == (TOPIC, 0)
    assert (gap["from_offset"], gap["to_offset"], gap["records"]) == (
        before, start, start - before
    )
    assert restarted_ms - 5_000 <= gap["at_ms"] <= int(time.time() * 1000)
    assert gap["reason"] == "source log start moved past the follower's position: retention"
    assert gap["stopped"] is False
    source_hw = partition0(a)["high_watermark"]
    poll("B copies on", lambda: partition0(b)["high_watermark"] == source_hw)
    assert partition0(b)["log_start_offset"] == start
    # The copy reads the same records at the same offsets from the gap on.
    ours = cli(b.bootstrap, "consume", TOPIC, "--from-beginning", "--max-messages", "3")
    theirs = cli(a.bootstrap, "consume", TOPIC, "--from-beginning", "--max-messages", "3")
    assert ours == theirs and ours[0]["offset"] == start

    history = cli(b.bootstrap, "provenance", TOPIC)["partitions"][0]["provenance"]
    [entry] = [e for e in history if e["kind"] == "gap"]
    assert (entry["offset"], entry["to_offset"], entry["at_ms"]) == (
        before, start, gap["at_ms"]
    )
    assert entry["link_name"] == "ab" and entry["reason"] == gap["reason"]
    text = run_cli("provenance", TOPIC, bootstrap=b.bootstrap).stdout
    assert f"gap [{before}, {start}): {start - before} records never copied (link ab" in text
    described = run_cli("describe-link", "ab", bootstrap=b.bootstrap).stdout
    assert f"gap: {TOPIC}-0 [{before}, {start}) {start - before} records never copied" in described

    labels = (("link", "ab"), ("partition", "0"), ("topic", TOPIC))
    samples = scrape(metrics_b)
    assert samples[("ccr_link_gaps_total", labels)] == 1.0
    assert samples[("ccr_link_gap_records_total", labels)] == float(start - before)
    assert (
        f"link 'ab': {TOPIC}-0 has a gap: offsets [{before}, {start}) "
        f"({start - before} records) were never copied"
    ) in b.stderr_text()

    # -- gap.policy stop: set on A, it converges to B ---------------------------------
    cli(a.bootstrap, "alter-link", "ab", "--gap-policy", "stop")
    poll("B has gap.policy stop", lambda: link(b)["gap_policy"] == "stop")
    before2, start2 = outage(a, b, "cut2")
    stopped = poll("B stopped at the gap", lambda: [g for g in gaps(b) if g["stopped"]])
    assert [(g["from_offset"], g["to_offset"]) for g in stopped] == [(before2, start2)]
    described_b = cli(b.bootstrap, "describe-link", "ab")
    assert described_b["state"] == "CATCHING_UP"
    [row] = [p for p in described_b["partitions"] if p["problem"]]
    assert "stopped at a gap (gap.policy stop)" in row["problem"]
    assert f"resume-partition ab {TOPIC} 0" in row["problem"]
    assert partition0(b)["log_end_offset"] == before2  # nothing skipped, nothing faked
    assert scrape(metrics_b)[("ccr_link_gaps_total", labels)] == 1.0

    refused = run_cli("resume-partition", "ab", TOPIC, "1", bootstrap=b.bootstrap)
    assert refused.returncode == 1 and "not stopped at a gap" in refused.stderr
    resumed = run_cli("resume-partition", "ab", TOPIC, "0", bootstrap=b.bootstrap)
    assert resumed.returncode == 0, resumed.stderr
    assert f"gap [{before2}, {start2}) recorded, copying from {start2}" in resumed.stdout
    source_hw = partition0(a)["high_watermark"]
    poll("B copies on", lambda: partition0(b)["high_watermark"] == source_hw)
    assert partition0(b)["log_start_offset"] == start2
    assert [(g["from_offset"], g["to_offset"], g["stopped"]) for g in gaps(b)] == [
        (before, start, False),
        (before2, start2, False),
    ]
    poll("FOLLOWING", lambda: link(b)["state"] == "FOLLOWING")
    samples = scrape(metrics_b)
    assert samples[("ccr_link_gaps_total", labels)] == 2.0
    assert samples[("ccr_link_gap_records_total", labels)] == float(
        start - before + start2 - before2
    )
    assert f"{TOPIC}-0 resumed by the operator" in b.stderr_text()
