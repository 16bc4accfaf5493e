"""`ccr-admin`: the operator CLI of a linkd cluster.

    ccr-admin [--bootstrap HOST:PORT] [--timeout SECONDS] COMMAND [--json] ...

    create-topic NAME --partitions N [--config k=v ...]
    list-topics [--include-internal]
    describe-topic NAME
    delete-topic NAME
    alter-topic-config NAME [--set k=v ...] [--delete k ...]
    create-partitions NAME --total N
    produce NAME [--key-separator SEP] [--partition P] [--acks 0|1|-1|all] [--header k=v ...]
    consume NAME [--from-beginning] [--group G] [--max-messages N]
                 [--isolation read_committed|read_uncommitted] [--partition P] [--timeout-ms T]
    list-groups
    describe-group G
    health [--wait SECONDS]     (--wait: until a starting daemon serves)
    describe-cluster
    whoami                      (the principal the cluster sees for this client)
    create-namespace --type topic|group|principal --prefix P [--reserved]
    list-namespaces [--type T]
    describe-namespace --type T --prefix P
    set-reserved --type T --prefix P --reserved true|false
    delete-namespace --type T --prefix P
    create-link NAME --remote HOST:PORT [--remote-credentials-file F] [--connection local|remote]
               [--config gap.policy=V] [--config fetch.bound=V] [--config failover.truncation=V]
               [--config failback.reconciliation=V]
    alter-link NAME [--remote-bootstrap HOST:PORT] [--remote-credentials-file F]
               [--local-bootstrap HOST:PORT] [--gap-policy continue|stop]
               [--fetch-bound high-watermark|last-stable-offset]
               [--failover-truncation abort|last-stable-offset]
               [--failback-reconciliation history|last-mirrored-offset|last-mirrored-leader-epoch]
    resume-partition LINK TOPIC PARTITION   (a follower partition stopped at a gap goes on)
    list-links
    describe-link NAME [--wait-for STATE [--wait SECONDS]]
    delete-link NAME
    top [--interval S] [--once] [--partitions N]   (links and their lag, live until Ctrl-C)
    attach-namespace --link L --type T --local-prefix P --remote-prefix Q --leader local|remote
    detach-namespace --link L --type T --local-prefix P
    failover --link L [--force]
    fault unclean-election --topic T --partition P --truncate-to OFFSET
    provenance TOPIC
    recover --link L [--namespace P[:Q] ...] [--group-namespace G[:H] ...] [--confirm]
    reverse --link L [--timeout-ms T]
    mirror --config FILE [--once] [--duration-s S] ...     (runs the MM2 engine here)
    create-mirror-link --config FILE [--as ALIAS] [--name NAME]
    mirror --config FILE --create-link [--as ALIAS] [--name NAME]   (the same)
    list-mirror-links [--include-deleted]
    delete-mirror-link NAME

--command-config FILE holds Kafka client properties for a secured cluster
(security.protocol, ssl.ca.location, ssl.certificate.location,
ssl.key.location, sasl.mechanism, sasl.username, sasl.password, or Java's
sasl.jaas.config); any other key is an error.

--bootstrap defaults to $CCR_BOOTSTRAP, else 127.0.0.1:9701. --timeout bounds
every call (and the wait for produce acknowledgements); default 30 seconds.

Exit codes: 0 success, 1 the operation failed (one line "error: CODE: message"
on stderr), 2 bad arguments (argparse's message), 3 pending (attach-namespace,
detach-namespace, set-mode or delete-link changed this cluster, but the remote
cluster has not confirmed the change; one line "pending: ..." on stderr says
what remains), 130 interrupted.

consume --json prints one object per record with exactly the keys topic,
partition, offset, key, value, timestamp, headers. key and value are strings
when they are valid UTF-8, null when absent, else {"base64": "..."}; headers
are a list of [name, value] pairs (values encoded the same way).
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from admin import top
from admin.admin_client import (
    NAMESPACE_TYPES,
    AdminClient,
    GroupInfo,
    GroupResumeInfo,
    HealthInfo,
    LinkInfo,
    MirrorLinkInfo,
    NamespaceInfo,
    PendingChange,
    TopicInfo,
)
from admin.client import (
    DEFAULT_BOOTSTRAP,
    OFFSET_BEGINNING,
    OFFSET_END,
    Message,
    TopicPartition,
)
from admin.consumer import Consumer
from admin.errors import CcrError
from admin.producer import Producer
from admin.security import read_command_config

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# The change holds on the cluster called, but the remote cluster has not
# confirmed it (attach-namespace, detach-namespace, set-mode, delete-link).
EXIT_PENDING = 3
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as one 'error: ...' line."""


class UsageError(CliError):
    """Bad arguments found after parsing: 'error: ...' and exit code 2."""


# ---------------------------------------------------------------------------
# Argument types
# ---------------------------------------------------------------------------


def _host_port(text: str) -> str:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return text.strip()


LISTENER_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _link_address(text: str) -> str:
    """A link partner's address: HOST:PORT, or PROTOCOL://HOST:PORT with one
    of Kafka's listener names (SSL and SASL_SSL dial TLS)."""
    protocol, sep, rest = text.strip().partition("://")
    if sep and protocol.upper() not in LISTENER_PROTOCOLS:
        raise argparse.ArgumentTypeError(
            f"unknown protocol {protocol!r} in {text!r} (known: {', '.join(LISTENER_PROTOCOLS)})"
        )
    _host_port(rest if sep else text)
    return f"{protocol.upper()}://{rest}" if sep else text.strip()


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text}")
    return value


def _credentials_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--remote-credentials-file",
        type=Path,
        metavar="FILE",
        help="the link credentials the remote requires (its first line); or "
        "$CCR_REMOTE_CREDENTIALS",
    )
    p.add_argument("--credentials", help=argparse.SUPPRESS)  # refused: `ps` shows it


def _non_empty(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "1"):
        return True
    if value in ("false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _default_bootstrap() -> str:
    return os.environ.get("CCR_BOOTSTRAP") or DEFAULT_BOOTSTRAP


# ---------------------------------------------------------------------------
# Output helpers
# ---------------------------------------------------------------------------


def _emit(obj: Any, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(json.dumps(obj, sort_keys=False) + "\n")


def _encode_bytes(data: bytes | None) -> str | dict[str, str] | None:
    """A string when valid UTF-8, else {"base64": ...}; None stays None."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def record_json(msg: Message) -> dict[str, Any]:
    """The --json form of one consumed record."""
    return {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "key": _encode_bytes(msg.key()),
        "value": _encode_bytes(msg.value()),
        "timestamp": msg.timestamp()[1],
        "headers": [[name, _encode_bytes(value)] for name, value in (msg.headers() or [])],
    }


def _topic_json(t: TopicInfo) -> dict[str, Any]:
    return {
        "name": t.name,
        "topic_id": t.topic_id,
        "partition_count": t.partition_count,
        "internal": t.internal,
        "configs": dict(sorted(t.configs.items())),
        "partitions": [
            {
                "partition": p.partition,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
                "last_stable_offset": p.last_stable_offset,
                "log_end_offset": p.log_end_offset,
                "leader_epoch": p.leader_epoch,
                "size_bytes": p.size_bytes,
                **({} if p.cleaner is None else {"cleaner": dataclasses.asdict(p.cleaner)}),
            }
            for p in t.partitions
        ],
    }


def _table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in cells]
    return "\n".join(lines)


def _print_topic(t: TopicInfo) -> None:
    print(
        f"topic {t.name}  id {t.topic_id}  partitions {t.partition_count}"
        + ("  (internal)" if t.internal else "")
    )
    if t.configs:
        print("configs:")
        for k, v in sorted(t.configs.items()):
            print(f"  {k}={v}")
    rows = [
        (
            p.partition,
            p.log_start_offset,
            p.high_watermark,
            p.last_stable_offset,
            p.log_end_offset,
            p.leader_epoch,
            p.size_bytes,
        )
        for p in t.partitions
    ]
    print(_table(rows, ("PARTITION", "LOG-START", "HW", "LSO", "LEO", "EPOCH", "BYTES")))
    cleaned = [p for p in t.partitions if p.cleaner is not None]
    if cleaned:
        print("log cleaner:")
        cleaner_rows = [
            (
                p.partition,
                c.cleaned_up_to,
                c.cleanable_end,
                f"{c.dirty_ratio:.2f}",
                _ms_text(c.last_clean_ms),
                c.cleans,
                c.removed_records,
            )
            for p in cleaned
            if (c := p.cleaner) is not None
        ]
        print(
            _table(
                cleaner_rows,
                ("PARTITION", "CLEANED-UP-TO", "CLEANABLE-END", "DIRTY", "LAST-CLEAN", "CLEANS",
                 "REMOVED"),
            )
        )


def _ms_text(ms: int) -> str:
    if ms < 0:
        return "never"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )[:-4] + "Z"


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def _client_config(args: argparse.Namespace) -> dict[str, Any]:
    """bootstrap.servers and the --command-config settings, for every client."""
    return {"bootstrap.servers": args.bootstrap, **getattr(args, "security", {})}


def _admin(args: argparse.Namespace) -> AdminClient:
    return AdminClient({**_client_config(args), "request.timeout.ms": int(args.timeout * 1000)})


def cmd_create_topic(args: argparse.Namespace) -> int:
    configs = dict(args.config or [])
    with _admin(args) as admin:
        t = admin.create_topic(args.name, args.partitions, configs)
    if args.json:
        _emit(_topic_json(t))
    else:
        print(f"created topic {t.name} ({t.partition_count} partitions)")
    return EXIT_OK


def cmd_list_topics(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        topics = admin.list_topics(include_internal=args.include_internal)
    if args.json:
        _emit(
            [
                {
                    "name": t.name,
                    "topic_id": t.topic_id,
                    "partition_count": t.partition_count,
                    "internal": t.internal,
                }
                for t in topics
            ]
        )
    else:
        for t in topics:
            print(t.name)
    return EXIT_OK


def cmd_describe_topic(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        t = admin.describe_topic(args.name)
    if args.json:
        _emit(_topic_json(t))
    else:
        _print_topic(t)
    return EXIT_OK


def cmd_delete_topic(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        admin.delete_topic(args.name)
    if args.json:
        _emit({"deleted": args.name})
    else:
        print(f"deleted topic {args.name}")
    return EXIT_OK


def cmd_alter_topic_config(args: argparse.Namespace) -> int:
    to_set = dict(args.set or [])
    to_delete = list(args.delete or [])
    if not to_set and not to_delete:
        raise CliError("alter-topic-config needs at least one --set k=v or --delete k")
    overlap = sorted(set(to_set) & set(to_delete))
    if overlap:
        raise CliError(f"config {', '.join(overlap)} is both set and deleted")
    with _admin(args) as admin:
        t = admin.alter_topic_configs(args.name, to_set, to_delete)
    if args.json:
        _emit(_topic_json(t))
    else:
        print(f"altered topic {t.name}; effective configs:")
        for k, v in sorted(t.configs.items()):
            print(f"  {k}={v}")
    return EXIT_OK


def cmd_create_partitions(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        t = admin.create_partitions(args.name, args.total)
    if args.json:
        _emit(_topic_json(t))
    else:
        print(f"topic {t.name} now has {t.partition_count} partitions")
    return EXIT_OK


def _read_lines(stream: Any) -> list[bytes]:
    lines = []
    for raw in stream:
        line = bytes(raw)
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        lines.append(line)
    return lines


def cmd_produce(args: argparse.Namespace) -> int:
    lines = _read_lines(sys.stdin.buffer)
    separator = args.key_separator.encode() if args.key_separator is not None else None
    records: list[tuple[bytes | None, bytes]] = []
    for number, line in enumerate(lines, 1):
        if separator is None:
            records.append((None, line))
            continue
        key, sep, value = line.partition(separator)
        if not sep:
            raise CliError(
                f"line {number} has no key separator {args.key_separator!r}; nothing was produced"
            )
        records.append((key, value))
    headers = [(k, v.encode()) for k, v in (args.header or [])]
    with _admin(args) as admin:
        desc = admin.describe_topic(args.name)
    if args.partition is not None and not 0 <= args.partition < desc.partition_count:
        raise CcrError(
            "UNKNOWN_PARTITION",
            f"topic {args.name!r} has no partition {args.partition} "
            f"(it has {desc.partition_count})",
        )
    timeout_ms = int(args.timeout * 1000)
    producer = Producer(
        {
            **_client_config(args),
            "acks": args.acks,
            "request.timeout.ms": timeout_ms,
            "delivery.timeout.ms": timeout_ms,
        }
    )
    results: list[tuple[CcrError | None, Message] | None] = [None] * len(records)

    def reporter(index: int) -> Callable[[CcrError | None, Message], None]:
        def report(err: CcrError | None, msg: Message) -> None:
            results[index] = (err, msg)

        return report

    deadline = time.monotonic() + args.timeout
    try:
        for index, (rec_key, rec_value) in enumerate(records):
            while True:
                try:
                    producer.produce(
                        args.name,
                        value=rec_value,
                        key=rec_key,
                        headers=headers,
                        partition=-1 if args.partition is None else args.partition,
                        on_delivery=reporter(index),
                    )
                    break
                except BufferError:
                    if time.monotonic() > deadline:
                        raise CcrError(
                            "TIMED_OUT", f"queue still full after {args.timeout:g} s"
                        ) from None
                    producer.poll(0.1)
        remaining = producer.flush(max(0.0, deadline - time.monotonic()))
    finally:
        producer.close(timeout=0)
    failed = [r for r in results if r is not None and r[0] is not None]
    if args.json:
        for r in results:
            if r is not None and r[0] is None:
                _emit(
                    {"topic": r[1].topic(), "partition": r[1].partition(), "offset": r[1].offset()}
                )
    if failed:
        first = failed[0][0]
        assert first is not None
        raise CcrError(
            first.code,
            f"{first.message} ({len(failed)} of {len(records)} records failed)",
        )
    missing = sum(1 for r in results if r is None)
    if remaining or missing:
        raise CcrError(
            "TIMED_OUT",
            f"{max(remaining, missing)} of {len(records)} records not acknowledged "
            f"within {args.timeout:g} s",
        )
    if not args.json:
        noun = "record" if len(records) == 1 else "records"
        print(f"produced {len(records)} {noun} to {args.name}")
    return EXIT_OK


def cmd_consume(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        desc = admin.describe_topic(args.name)
    if args.partition is not None and not 0 <= args.partition < desc.partition_count:
        raise CcrError(
            "UNKNOWN_PARTITION",
            f"topic {args.name!r} has no partition {args.partition} "
            f"(it has {desc.partition_count})",
        )
    config: dict[str, Any] = {
        **_client_config(args),
        "request.timeout.ms": int(args.timeout * 1000),
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": False,
        "isolation.level": args.isolation,
        "client.id": "ccr-admin",
    }
    if args.group:
        config["group.id"] = args.group
        config["heartbeat.interval.ms"] = 1000
    # Errors outside a partition (the cluster unreachable, ...): remembered while
    # no record arrives, reported if the command ends that way.
    pending_errors: list[CcrError] = []
    config["error_cb"] = pending_errors.append
    consumer = Consumer(config)
    count = 0
    idle_s = args.timeout_ms / 1000.0
    try:
        start_offset = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        if args.group and args.partition is None:
            consumer.subscribe([args.name])
        else:
            parts = (
                [args.partition]
                if args.partition is not None
                else [p.partition for p in desc.partitions]
            )
            # With a group, start from its committed offsets (auto.offset.reset
            # otherwise); without, from the beginning or the end.
            offset = -1001 if args.group else start_offset
            consumer.assign([TopicPartition(args.name, p, offset) for p in parts])
        last = time.monotonic()
        while args.max_messages is None or count < args.max_messages:
            left = idle_s - (time.monotonic() - last)
            if left <= 0:
                break
            msg = consumer.poll(min(left, 0.5))
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                raise err
            count += 1
            last = time.monotonic()
            pending_errors.clear()
            if args.json:
                _emit(record_json(msg))
            else:
                value = msg.value()
                sys.stdout.write((value or b"").decode("utf-8", errors="replace") + "\n")
        sys.stdout.flush()
        if pending_errors:
            raise pending_errors[-1]
        if args.group and count:
            try:
                consumer.commit(asynchronous=False)
            except CcrError as exc:
                if exc.code != "NO_OFFSET":
                    raise
    finally:
        consumer.close()
    noun = "message" if count == 1 else "messages"
    print(f"consumed {count} {noun} from {args.name}", file=sys.stderr)
    return EXIT_OK


def cmd_list_groups(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        groups = admin.list_groups()
    if args.json:
        _emit(
            [
                {"group_id": g.group_id, "state": g.state, "protocol_type": g.protocol_type}
                for g in groups
            ]
        )
    else:
        print(
            _table(
                [(g.group_id, g.state, g.protocol_type) for g in groups],
                ("GROUP", "STATE", "PROTOCOL-TYPE"),
            )
        )
    return EXIT_OK


def _group_json(g: GroupInfo, lags: Sequence[Any]) -> dict[str, Any]:
    return {
        "group_id": g.group_id,
        "state": g.state,
        "protocol_type": g.protocol_type,
        "protocol_name": g.protocol_name,
        "generation_id": g.generation_id,
        "leader_id": g.leader_id,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "group_instance_id": m.group_instance_id,
                "assignment": [[tp.topic, tp.partition] for tp in m.assignment],
            }
            for m in g.members
        ],
        "offsets": [lag.to_dict() for lag in lags],
    }


def cmd_describe_group(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        g = admin.describe_group(args.group)
        lags = admin.group_lag(args.group, group=g)
    if g.state in ("Dead", "") and not g.members and not lags:
        raise CcrError("GROUP_ID_NOT_FOUND", f"group {args.group!r} does not exist")
    if args.json:
        _emit(_group_json(g, lags))
        return EXIT_OK
    print(
        f"group {g.group_id}  state {g.state}  protocol {g.protocol_type or '-'}"
        f"/{g.protocol_name or '-'}  generation {g.generation_id}"
    )
    if g.members:
        print("members:")
        for m in g.members:
            owned = ", ".join(f"{tp.topic}-{tp.partition}" for tp in m.assignment) or "-"
            leader = " (leader)" if m.member_id == g.leader_id else ""
            print(f"  {m.member_id}{leader}  client {m.client_id or '-'}  partitions: {owned}")
    else:
        print("members: none")
    owner = {(tp.topic, tp.partition): m.member_id for m in g.members for tp in m.assignment}
    rows = [
        (
            lag.topic,
            lag.partition,
            lag.committed if lag.committed >= 0 else "-",
            lag.high_watermark if lag.high_watermark >= 0 else "-",
            lag.lag if lag.lag >= 0 else "-",
            owner.get((lag.topic, lag.partition), "-"),
        )
        for lag in lags
    ]
    print(_table(rows, ("TOPIC", "PARTITION", "COMMITTED", "HW", "LAG", "MEMBER")))
    return EXIT_OK


# How often `health --wait` asks again while the cluster cannot be reached.
HEALTH_RETRY_S = 0.2


def _health_waiting(args: argparse.Namespace) -> HealthInfo:
    """The cluster's health; while it cannot be reached (UNAVAILABLE: not
    listening yet, still starting), asked again until `--wait` has passed. Each
    attempt opens a new channel: a channel that failed to connect waits out
    gRPC's reconnect backoff (1 s, then longer) before it tries again."""
    deadline = time.monotonic() + args.wait
    while True:
        try:
            with _admin(args) as admin:
                return admin.health()
        except CcrError as exc:
            if exc.code != "UNAVAILABLE" or time.monotonic() >= deadline:
                raise
        time.sleep(HEALTH_RETRY_S)


def cmd_health(args: argparse.Namespace) -> int:
    h = _health_waiting(args)
    if args.json:
        _emit(
            {
                "cluster_id": h.cluster_id,
                "status": h.status,
                "version": h.version,
                "uptime_ms": h.uptime_ms,
            }
        )
    else:
        print(
            f"cluster {h.cluster_id}: {h.status} (version {h.version}, "
            f"up {h.uptime_ms / 1000:.1f} s)"
        )
    return EXIT_OK


def cmd_whoami(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        principal = admin.whoami()
    if args.json:
        _emit({"principal": principal})
    else:
        print(principal)
    return EXIT_OK


def cmd_describe_cluster(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        c = admin.describe_cluster()
    info = {
        "cluster_id": c.cluster_id,
        "version": c.version,
        "topic_count": c.topic_count,
        "group_count": c.group_count,
        "data_dir": c.data_dir,
        "fsync": c.fsync,
    }
    if args.json:
        _emit(info)
    else:
        for k, v in info.items():
            print(f"{k}: {v}")
    return EXIT_OK


def _namespace_title(ns: NamespaceInfo) -> str:
    return f"{ns.type} namespace {ns.prefix!r}"


def cmd_create_namespace(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        ns = admin.create_namespace(args.type, args.prefix, reserved=args.reserved)
    if args.json:
        _emit(ns.to_dict())
    else:
        print(f"created {_namespace_title(ns)}" + (" (reserved)" if ns.reserved else ""))
    return EXIT_OK


def cmd_list_namespaces(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        namespaces = admin.list_namespaces(args.type)
    if args.json:
        _emit([ns.to_dict() for ns in namespaces])
    else:
        rows = [
            (
                ns.type,
                ns.prefix if ns.prefix else '""',
                "yes" if ns.reserved else "no",
                ",".join(ns.attachments) or "-",
            )
            for ns in namespaces
        ]
        print(_table(rows, ("TYPE", "PREFIX", "RESERVED", "ATTACHMENTS")))
    return EXIT_OK


def cmd_describe_namespace(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        d = admin.describe_namespace(args.type, args.prefix)
    if args.json:
        _emit(d.to_dict())
        return EXIT_OK
    ns = d.namespace
    print(f"{_namespace_title(ns)}  reserved {'yes' if ns.reserved else 'no'}")
    print(f"attachments: {', '.join(ns.attachments) or 'none'}")
    noun = "topics" if ns.type == "topic" else "groups" if ns.type == "group" else "resources"
    if d.resources:
        print(f"{noun}:")
        for name in d.resources:
            print(f"  {name}")
    else:
        print(f"{noun}: none")
    return EXIT_OK


def cmd_set_reserved(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        result = admin.set_reserved(args.type, args.prefix, args.reserved)
    ns = result.namespace
    if args.json:
        _emit(result.to_dict())
        return EXIT_OK
    print(f"{_namespace_title(ns)} is {'reserved' if ns.reserved else 'not reserved'}")
    if result.aborted_transactions:
        print(
            f"aborted {len(result.aborted_transactions)} open transactions: "
            + ", ".join(result.aborted_transactions)
        )
    _print_aborted_dangling(result.aborted_dangling)
    return EXIT_OK


def cmd_delete_namespace(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        admin.delete_namespace(args.type, args.prefix)
    if args.json:
        _emit({"deleted": {"type": args.type, "prefix": args.prefix}})
    else:
        print(f"deleted {args.type} namespace {args.prefix!r}")
    return EXIT_OK


def partition_problem_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A line for each describe-link row whose partition is not copied: held
    for this cluster's own writes (`own_writes_held`, until `recover`), or
    kept back by what its problem names."""
    lines = []
    for p in rows:
        where = f"{p['topic']}-{p['partition']}"
        if p.get("own_writes_held"):
            lines.append(
                f"held for its own writes: {where} keeps records this cluster's clients "
                f"wrote; it is not copied until `recover` cuts them (the cut is shown "
                f"first and needs --confirm): {p['problem']}"
            )
        elif p.get("problem"):
            lines.append(f"not copied: {where}: {p['problem']}")
    return lines


def _print_link(link: LinkInfo) -> None:
    print(f"link {link.name} ({link.link_id})")
    print(
        f"  {link.local_cluster_id} <-> {link.remote_cluster_id} at {link.remote_bootstrap}"
        f"  mode {link.mode}  state {link.state}  dials: {link.connection_direction}"
    )
    if link.last_error:
        since = "" if link.state == "DISCONNECTED" else " (connected again since)"
        print(f"  last error{since}: {link.last_error_code}: {link.last_error} "
              f"({_age(link.last_error_at_ms)})")
    for m in link.mappings:
        print(
            f"  {m['type']} {m['local_prefix']!r} -> {m['remote_prefix']!r}  leader: {m['leader']}"
        )
    for m in link.refused_mappings:
        print(
            f"  refused: {m['type']} {m['local_prefix']!r} -> {m['remote_prefix']!r}  "
            f"leader: {m['leader']}: {m.get('note', '')}"
        )
    if link.partitions:
        rows = [
            (
                p["topic"],
                str(p["partition"]),
                p["role"],
                str(p["lag_records"]) if p["lag_known"] else "unknown",
                str(p["lag_ms"]) if p["lag_known"] else "unknown",
                str(p["high_watermark"]) if p["role"] == "follower" else "-",
                str(p["log_end_offset"]),
                _age(p["source_hw_known_at_ms"]) if p["role"] == "follower" else "now",
            )
            for p in link.partitions
        ]
        header = (
            "TOPIC",
            "PARTITION",
            "ROLE",
            "LAG_RECORDS",
            "LAG_MS",
            "READABLE",
            "LEO",
            "SOURCE_HW_AS_OF",
        )
        print(_table(rows, header))
        for line in partition_problem_lines(link.partitions):
            print(f"  {line}")
    print(
        f"  gap.policy {link.gap_policy}, fetch.bound {link.fetch_bound}, "
        f"failover.truncation {link.failover_truncation}, "
        f"failback.reconciliation {link.failback_reconciliation}"
    )
    plan = link.procedure
    if plan is not None:
        moved = ", ".join(f"{n['type']} {n['local_prefix']!r}" for n in plan["namespaces"])
        # reverse moves the namespaces to the remote; failover takes them
        # from it; recover makes them follow it again.
        towards = {"failover": "from", "recover": "following"}.get(plan["procedure"], "to")
        again = plan["procedure"] + (" --confirm" if plan["procedure"] == "recover" else "")
        print(
            f"  procedure in progress: {plan['procedure']} of {moved} {towards} "
            f"{plan['remote_cluster_id']}, next step {plan['next_step']} "
            f"(run {again} again on this cluster to finish it)"
        )
        for st in plan["steps"]:
            print(f"    {st['name']}: {'ok' if st['ok'] else 'FAILED'}: {st['result']}")
    if link.credential_problem:
        print(f"  credential: {link.credential_problem}")
    for g in link.gaps:
        state = "stopped there (resume-partition goes on)" if g["stopped"] else "recorded"
        print(
            f"  gap: {g['topic']}-{g['partition']} [{g['from_offset']}, {g['to_offset']}) "
            f"{g['records']} records never copied, at {g['at_ms']} ms, {state}: {g['reason']}"
        )


REMOTE_CREDENTIALS_ENV = "CCR_REMOTE_CREDENTIALS"


def _remote_credentials(args: argparse.Namespace) -> str | None:
    """The link credentials the remote requires: the first line of
    --remote-credentials-file (blank lines and # comments skipped), else
    $CCR_REMOTE_CREDENTIALS; never a command-line value (`ps` shows those)."""
    if args.credentials is not None:
        raise UsageError(
            "--credentials is no longer accepted: a secret on the command line is visible to "
            f"every local user; use --remote-credentials-file FILE or ${REMOTE_CREDENTIALS_ENV}"
        )
    path: Path | None = args.remote_credentials_file
    if path is None:
        return os.environ.get(REMOTE_CREDENTIALS_ENV) or None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {args.remote_credentials_file}: {exc}") from exc
    for line in lines:
        if line.strip() and not line.strip().startswith("#"):
            return line.strip()
    raise UsageError(f"{args.remote_credentials_file} holds no credentials")


def cmd_create_link(args: argparse.Namespace) -> int:
    credentials = _remote_credentials(args)
    with _admin(args) as admin:
        link = admin.create_link(
            args.name,
            args.remote,
            credentials=credentials or "",
            connection=args.connection,
            local_bootstrap=args.local_bootstrap,
            configs=dict(args.config or []),
        )
    if args.json:
        _emit(link.to_dict())
    else:
        print(f"created link {link.name}: {link.local_cluster_id} -> {link.remote_cluster_id}")
    return EXIT_OK


def cmd_alter_link(args: argparse.Namespace) -> int:
    credentials = _remote_credentials(args)
    if (
        args.remote_bootstrap is None
        and credentials is None
        and args.local_bootstrap is None
        and args.gap_policy is None
        and args.fetch_bound is None
        and args.failover_truncation is None
        and args.failback_reconciliation is None
    ):
        raise UsageError(
            "alter-link needs --remote-bootstrap, --remote-credentials-file "
            f"(or ${REMOTE_CREDENTIALS_ENV}), --local-bootstrap, --gap-policy, --fetch-bound, "
            "--failover-truncation or --failback-reconciliation"
        )
    with _admin(args) as admin:
        link = admin.alter_link(
            args.name,
            remote=args.remote_bootstrap,
            credentials=credentials,
            local_bootstrap=args.local_bootstrap,
            gap_policy=args.gap_policy,
            fetch_bound=args.fetch_bound,
            failover_truncation=args.failover_truncation,
            failback_reconciliation=args.failback_reconciliation,
        )
    if args.json:
        _emit(link.to_dict())
    else:
        print(
            f"altered link {link.name}: dials {link.remote_bootstrap or '(the remote dials)'}, "
            f"gap.policy {link.gap_policy}, fetch.bound {link.fetch_bound}, "
            f"failover.truncation {link.failover_truncation}, "
            f"failback.reconciliation {link.failback_reconciliation}"
        )
    return EXIT_OK


def cmd_resume_partition(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        link = admin.resume_partition(args.link, args.topic, args.partition)
    if args.json:
        _emit(link.to_dict())
    else:
        gap = [
            g
            for g in link.gaps
            if (g["topic"], g["partition"]) == (args.topic, args.partition) and not g["stopped"]
        ][-1]
        print(
            f"resumed {args.topic}-{args.partition} on link {link.name}: gap "
            f"[{gap['from_offset']}, {gap['to_offset']}) recorded, copying from {gap['to_offset']}"
        )
    return EXIT_OK


def cmd_list_links(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        links = admin.list_links()
    if args.json:
        _emit([link.to_dict() for link in links])
    else:
        rows = [(x.name, x.remote_cluster_id, x.mode, x.state) for x in links]
        print(_table(rows, ("NAME", "REMOTE", "MODE", "STATE")))
    return EXIT_OK


# The states `describe-link --wait-for` accepts (the core's LinkState values).
LINK_STATES = ("DISCONNECTED", "CATCHING_UP", "FOLLOWING", "SYNCING", "IN_SYNC", "OUT_OF_SYNC")
# How often `describe-link --wait-for` asks again.
LINK_POLL_S = 0.2


def _link_in_state(admin: AdminClient, name: str, state: str, wait_s: float) -> LinkInfo:
    """The link once this cluster sees it in `state`, asked every LINK_POLL_S;
    TIMED_OUT naming the state it is in when `wait_s` has passed first."""
    deadline = time.monotonic() + wait_s
    while True:
        link = admin.describe_link(name)
        if link.state == state:
            return link
        if time.monotonic() >= deadline:
            raise CcrError(
                "TIMED_OUT",
                f"link {name} is {link.state} after {wait_s:g} s, not {state}",
                resource=f"link {name}",
            )
        time.sleep(LINK_POLL_S)


def cmd_describe_link(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        if args.wait_for:
            link = _link_in_state(admin, args.name, args.wait_for, args.wait)
        else:
            link = admin.describe_link(args.name)
    if args.json:
        _emit(link.to_dict())
    else:
        _print_link(link)
    return EXIT_OK


def cmd_top(args: argparse.Namespace) -> int:
    """Links and their lag: one frame (--once, --json), or live until Ctrl-C."""
    def now_ms() -> int:
        return time.time_ns() // 1_000_000

    with _admin(args) as admin:
        if args.json or args.once:
            frame = top.read_frame(admin, now_ms, args.bootstrap)
            if args.json:
                _emit(frame.to_dict())
            else:
                sys.stdout.write(top.render(frame, max_partitions=args.partitions))
            return EXIT_OK
        # Ctrl-C is how a live view ends. It sets a flag rather than raising
        # KeyboardInterrupt: raised inside a gRPC call, the interrupt came back
        # as a failed call, was shown in a frame, and the view went on.
        stop = threading.Event()
        before = signal.signal(signal.SIGINT, lambda _sig, _frame: stop.set())
        try:
            top.watch(
                lambda: top.read_frame(admin, now_ms, args.bootstrap),
                args.bootstrap,
                sys.stdout,
                interval_s=args.interval,
                max_partitions=args.partitions,
                clear=sys.stdout.isatty(),
                wait=stop.wait,
                stopped=stop.is_set,
            )
        finally:
            signal.signal(signal.SIGINT, before)
    return EXIT_OK


def _pending_exit(pending: PendingChange | None, done: str) -> int:
    """Prints what an admin call's change still waits for (to stderr, beside
    the answer); EXIT_PENDING if anything, else EXIT_OK."""
    if pending is None:
        return EXIT_OK
    print(
        f"pending: {done} here, not confirmed by {pending.remote_cluster_id} "
        f"({pending.reason}); remains: {pending.remains}",
        file=sys.stderr,
    )
    return EXIT_PENDING


def cmd_delete_link(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        deletion = admin.delete_link(args.name)
    pending = deletion.pending
    if args.json:
        _emit({"deleted": args.name, **deletion.to_dict()})
    else:
        if pending is None:
            print(f"deleted link {args.name}")
        else:
            print(f"deleted link {args.name} here (pending on the remote)")
        _print_aborted_dangling(deletion.aborted_dangling)
    return _pending_exit(pending, f"link {args.name} deleted")


def _print_aborted_dangling(aborted: list[dict[str, Any]]) -> None:
    """One line per replicated transaction a change aborted here."""
    for d in aborted:
        print(
            f"aborted a replicated transaction left open in {d['topic']}-{d['partition']} "
            f"(producer {d['producer_id']}, from offset {d['first_offset']}): it follows "
            "nothing now, no coordinator would end it"
        )


def cmd_attach_namespace(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        link = admin.attach_namespace(
            args.link, args.type, args.local_prefix, args.remote_prefix, args.leader
        )
    what = f"{args.type} namespace {args.local_prefix!r} attached to link {args.link}"
    if args.json:
        _emit(link.to_dict())
    elif link.pending is None:
        print(
            f"attached {args.type} namespace {args.local_prefix!r} to link {args.link} "
            f"(remote {args.remote_prefix!r}, leader {args.leader})"
        )
    else:
        print(
            f"pending: {args.type} namespace {args.local_prefix!r} attached to link "
            f"{args.link} here (remote {args.remote_prefix!r}, leader {args.leader}); "
            f"{link.pending.remote_cluster_id} has not confirmed it"
        )
    if not args.json:
        _print_aborted_dangling(link.aborted_dangling)
    return _pending_exit(link.pending, what)


def cmd_detach_namespace(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        link = admin.detach_namespace(args.link, args.type, args.local_prefix)
    what = f"{args.type} namespace {args.local_prefix!r} detached from link {args.link}"
    if args.json:
        _emit(link.to_dict())
        return _pending_exit(link.pending, what)
    if link.pending is None:
        print(f"detached {args.type} namespace {args.local_prefix!r} from link {args.link}")
    else:
        print(
            f"pending: {what} here; {link.pending.remote_cluster_id} has not confirmed it"
        )
    _print_aborted_dangling(link.aborted_dangling)
    return _pending_exit(link.pending, what)


def cmd_failover(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        result = admin.failover(args.link, force=args.force)
    if args.json:
        _emit(result.to_dict())
        return EXIT_OK
    for ns in result.namespaces:
        print(f"{_namespace_title(ns)} is now writable (detached from {args.link})")
    for line in failover_lines(result.abandoned, result.aborted_transactions):
        print(line)
    for c in result.truncated:
        print(
            f"cut {c['topic']}-{c['partition']} at its last stable offset {c['truncate_to']}: "
            f"{c['records_removed']} records removed ({c['open_transactions']} open "
            "transactions and every record after the first of them; failover.truncation "
            "last-stable-offset)"
        )
    for g in result.groups:
        print(_group_resume_text(g))
    _print_steps(result.steps, result.resumed_from)
    return EXIT_OK


def _print_steps(steps: list[dict[str, Any]], resumed_from: str) -> None:
    """A durable procedure's steps (failover, recover), one line each."""
    if resumed_from:
        print(f"took up the journalled plan at {resumed_from}")
    for st in steps:
        print(f"step {st['name']}: {'ok' if st['ok'] else 'FAILED'}: {st['result']}")


def failover_lines(abandoned: list[dict[str, Any]], aborted: list[dict[str, Any]]) -> list[str]:
    """What a failover abandoned and aborted, as an operator reads it: a
    known lag is a count of records; an unknown one says since when (what
    the source acknowledged after that time may be missing), or that it was
    never learned."""
    if not abandoned:
        out = ["abandoned nothing: the lag of every follower partition was known and zero"]
    else:
        known = [p for p in abandoned if p["lag_known"]]
        unknown = [p for p in abandoned if not p["lag_known"]]
        total = sum(p["lag_records"] for p in known)
        parts = []
        if known:
            parts.append(f"{total} records on {len(known)} partitions")
        if unknown:
            parts.append(f"{len(unknown)} partitions whose lag is not known")
        out = [f"abandoned {' and '.join(parts)}:"]
        for p in abandoned:
            out.append("  " + _abandoned_line(p))
        if unknown:
            out.append(
                "  (a lag not known: records the source acknowledged after the time shown may "
                "be missing here; compare with the source's log if it comes back)"
            )
    for d in aborted:
        out.append(
            f"aborted a replicated transaction left open in {d['topic']}-{d['partition']} "
            f"(producer {d['producer_id']}, from offset {d['first_offset']})"
        )
    return out


def _abandoned_line(p: dict[str, Any]) -> str:
    name = f"{p['topic']}-{p['partition']}"
    readable = p.get("high_watermark", p["log_end_offset"])
    if p["lag_known"]:
        return (
            f"{name}: {p['lag_records']} records (readable to {readable}, log end "
            f"{p['log_end_offset']}, source high "
            f"watermark {p['source_high_watermark']} learned {_age(p['source_hw_known_at_ms'])})"
        )
    since = int(p.get("unknown_since_ms", p["source_hw_known_at_ms"]))
    if since < 0 or p["source_high_watermark"] < 0:
        return (
            f"{name}: lag never learned (no fetch answer reached it; readable to "
            f"{readable}, log end "
            f"{p['log_end_offset']}): anything the source held past that may be missing"
        )
    behind = max(0, p["source_high_watermark"] - readable)
    return (
        f"{name}: lag unknown since {_age(since)} (at {_ms_text(since)}): then the source's high "
        f"watermark was {p['source_high_watermark']} and this cluster could read to "
        f"{readable} (log end {p['log_end_offset']}; {behind} records behind), plus whatever "
        "the source acknowledged after that"
    )


def _group_resume_text(g: GroupResumeInfo) -> str:
    """A replicated group's partition after a failover, for an operator."""
    where = f"{g.topic}-{g.partition}"
    resume = "no committed offset (auto.offset.reset decides)"
    if g.resume_offset >= 0:
        resume = f"resumes at {g.resume_offset}"
    if g.last_commit_heard < 0:
        heard = "no commit heard from the source since this cluster started"
    else:
        heard = f"last commit heard {g.last_commit_heard} ({_age(g.heard_at_ms)})"
    gap = (
        f"; {g.behind} records it processed there are not resumed past here"
        if g.behind > 0
        else ""
    )
    return f"group {g.group} {where}: {resume}; {heard}{gap}"


def _age(at_ms: int) -> str:
    """How long ago a wall-clock time was, for an operator."""
    if at_ms <= 0:
        return "never"
    return f"{max(0, int(time.time() * 1000) - at_ms)} ms ago"


def cmd_set_mode(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        link = admin.set_link_mode(args.link, args.mode)
    if args.json:
        _emit(link.to_dict())
    else:
        print(
            f"link {link.name} is {link.mode} (state {link.state})"
            + ("" if link.pending is None else "; pending on the remote")
        )
    return _pending_exit(link.pending, f"link {link.name} set to {link.mode}")


def cmd_fault(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        result = admin.unclean_election(args.topic, args.partition, args.truncate_to)
    if args.json:
        _emit({"topic": args.topic, "partition": args.partition, **result})
    else:
        print(
            f"unclean election on {args.topic}-{args.partition}: removed "
            f"{result['removed_records']} records, leader epoch now {result['leader_epoch']}, "
            f"log end offset {result['log_end_offset']}"
        )
    return EXIT_OK


def _provenance_text(e: dict[str, Any]) -> str:
    link = e["link_name"] or e["link_id"] or "-"
    if e["kind"] == "start":
        return (
            f"from {e['offset']}: copied from {e['source_cluster_id']} "
            f"(link {link}, epoch {e['link_epoch']})"
        )
    if e["kind"] == "detached":
        return f"at {e['offset']}: detached from link {link}"
    if e["kind"] == "gap":
        return (
            f"gap [{e['offset']}, {e['to_offset']}): {e['to_offset'] - e['offset']} records "
            f"never copied (link {link}, at {e['at_ms']} ms: {e['reason']})"
        )
    reason = e.get("reason") or ""
    why = " after a divergence" if reason == "diverged" else f" ({reason})" if reason else ""
    moved = "".join(
        f"; group {m['group']} moved back from {m['from_offset']}"
        for m in e.get("offsets_moved", [])
    )
    reopened = "".join(
        f"; the cut removed the COMMIT of producer {u['producer_id']}'s transaction: its records "
        f"from {u['first_offset']} are no longer committed here"
        for u in e.get("uncommitted", [])
    )
    when = f", at {e['at_ms']} ms" if e.get("at_ms") else ""
    return (
        f"at {e['offset']}: truncated{why} ({e['removed_records']} records removed, "
        f"link {link}{when}{moved}{reopened})"
    )


def cmd_provenance(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        report = admin.get_provenance(args.topic)
    if args.json:
        _emit(report)
        return EXIT_OK
    print(f"topic {report['topic']}  id {report['topic_id']}")
    rows = [
        (
            p["partition"],
            p["log_start_offset"],
            p["high_watermark"],
            p["log_end_offset"],
            p["leader_epoch"],
            " ".join(f"{e['epoch']}@{e['start_offset']}" for e in p["epoch_history"]),
        )
        for p in report["partitions"]
    ]
    print(_table(rows, ("PARTITION", "LOG-START", "HW", "LEO", "EPOCH", "EPOCHS (EPOCH@START)")))
    for p in report["partitions"]:
        entries = p["provenance"]
        print(f"partition {p['partition']}: " + ("written here" if not entries else ""))
        for e in entries:
            print(f"  {_provenance_text(e)}")
    return EXIT_OK


def _print_recovery(report: dict[str, Any]) -> None:
    verb = "truncated" if report["confirmed"] else "would truncate"
    print(
        f"link {report['link']}: {report['local_cluster_id']} follows "
        f"{report['remote_cluster_id']}" + ("" if report["confirmed"] else " (report only)")
    )
    rows = [
        (
            r["topic"],
            r["partition"],
            r["local_log_end_offset"],
            r["remote_log_end_offset"],
            r["common_offset"],
            r["truncate_to"],
            r["local_records_lost"],
            r["remote_records_lost"],
            r["reason"],
        )
        for r in report["partitions"]
    ]
    print(
        _table(
            rows,
            (
                "TOPIC",
                "PARTITION",
                "LEO",
                "REMOTE-LEO",
                "COMMON",
                "CUT",
                "LOST-HERE",
                "LOST-REMOTE",
                "REASON",
            ),
        )
    )
    totals = report["totals"]
    print(
        f"{verb} {totals['local_records_lost']} records on "
        f"{totals['diverged_partitions']} partitions (the remote would lose "
        f"{totals['remote_records_lost']} if the roles were swapped)"
    )
    for r in report["partitions"]:
        for t in r.get("reopened_transactions", []):
            outcome = "committed" if t["committed"] else "aborted"
            by = " by this cluster" if t["own_marker"] else ""
            print(
                f"  reopens {r['topic']}-{r['partition']}: producer {t['producer_id']}'s "
                f"transaction from offset {t['first_offset']} ({outcome}{by} at "
                f"{t['marker_offset']}; the remote decides it again, and a read_committed "
                "reader that passed it aborted does not read it)"
            )
    for g in report["groups"]:
        print(
            f"  group {g['group']}: {g['topic']}-{g['partition']} committed "
            f"{g['committed_offset']} -> "
            f"{g['new_offset'] if g['new_offset'] >= 0 else 'removed (the new leader has none)'}"
        )
    if not report["confirmed"]:
        print("run again with --confirm to truncate and follow the remote")


def cmd_recover(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        report = admin.recover_link(
            args.link,
            namespaces=args.namespace or [],
            group_namespaces=args.group_namespace or [],
            confirm=args.confirm,
        )
    if args.json:
        _emit(report)
    else:
        _print_recovery(report)
        _print_steps(report["steps"], report["resumed_from"])
        for note in report["notes"]:
            print(f"not completed: {note}")
    # Cut, but not following: the operator must act.
    return EXIT_FAILED if report["notes"] else EXIT_OK


def cmd_reverse(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        result = admin.reverse_link(args.link, timeout_ms=args.timeout_ms)
    if args.json:
        _emit(result.to_dict())
    else:
        rows = [
            (s["name"], "ok" if s["ok"] else "FAILED", s["duration_ms"], s["result"])
            for s in result.steps
        ]
        print(_table(rows, ("STEP", "RESULT", "MS", "DETAIL")))
        if result.resumed_from:
            print(f"took up the journalled plan at {result.resumed_from}")
        if result.pending:
            print("the plan stays journalled: run reverse again on this cluster to finish it")
        if result.rolled_back:
            print("rolled back: this side leads and takes writes again")
    if not result.ok:
        raise CliError(f"{result.error_code}: {result.error_message}")
    return EXIT_OK


def cmd_mirror(args: argparse.Namespace) -> int:
    if args.create_link:
        if args.once or args.duration_s is not None:
            return _usage("mirror --create-link stores the link on the daemon; "
                          "--once and --duration-s apply only to running the engine here")
        return cmd_create_mirror_link(args)
    if args.alias is not None or args.link_name is not None:
        return _usage("mirror: --as and --name need --create-link (they name the mirror link "
                      "created on the daemon at --bootstrap)")
    # Lazy import: only this command needs the Kafka client library.
    from mirror.cli import run as run_mirror

    return run_mirror(args)


def _usage(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _mirror_flows_text(link: MirrorLinkInfo) -> str:
    return ", ".join(
        f"{f['flow']}" + ("" if f["replicates"] else " (heartbeats only)") for f in link.flows
    )


def cmd_create_mirror_link(args: argparse.Namespace) -> int:
    path: str = args.config
    try:
        with open(path, encoding="utf-8") as fh:
            properties = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        return _usage(f"cannot read --config {path}: {exc}")
    name = args.link_name
    if name is None:
        name = os.path.splitext(os.path.basename(path))[0]
    with _admin(args) as admin:
        link = admin.create_mirror_link(name, properties, alias=args.alias or "")
    if args.json:
        _emit(link.to_dict())
        return EXIT_OK
    for w in link.warnings:
        print(f"warning: {path}: {w}")
    print(f"created mirror link {link.name} (this cluster is {link.alias!r} in {path})")
    print(f"  hosted here: {_mirror_flows_text(link)}")
    if link.not_hosted:
        print(
            f"  not hosted here: {', '.join(link.not_hosted)} "
            "(create the link on each target cluster's daemon)"
        )
    return EXIT_OK


def cmd_list_mirror_links(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        links = admin.list_mirror_links(include_deleted=args.include_deleted)
    if args.json:
        _emit([link.to_dict() for link in links])
        return EXIT_OK
    rows = []
    for link in links:
        copied = sum(int(f["stats"].get("records_copied", 0)) for f in link.flows)
        if link.deleted_at_ms:
            state = "deleted"
        else:
            state = "running" if link.running else "starting"
        rows.append(
            (
                link.name,
                link.alias,
                _mirror_flows_text(link) or "-",
                state,
                str(copied),
                " ".join(link.last_error.split())[:80] or "-",
            )
        )
    print(_table(rows, ("NAME", "ALIAS", "FLOWS", "STATE", "RECORDS_COPIED", "LAST_ERROR")))
    return EXIT_OK


def cmd_delete_mirror_link(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        stopped = admin.delete_mirror_link(args.name)
    if args.json:
        _emit({"deleted": args.name, "stopped": stopped})
    elif stopped:
        print(f"deleted mirror link {args.name}")
    else:
        print(f"deleted mirror link {args.name} (its engine ends after its current step)")
    return EXIT_OK


def _mirror_link_arguments(p: Any) -> None:
    p.add_argument(
        "--as",
        dest="alias",
        metavar="ALIAS",
        type=_non_empty,
        help="this cluster's alias in the file (default: its cluster id)",
    )
    p.add_argument(
        "--name",
        dest="link_name",
        metavar="NAME",
        type=_non_empty,
        help="the mirror link's name (default: the file's name without its extension)",
    )


# ---------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------


_Add = Callable[[str, Callable[[argparse.Namespace], int], str], Any]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ccr-admin", description="Operate a linkd cluster (topics, records, groups)."
    )
    parser.add_argument(
        "--bootstrap",
        type=_host_port,
        default=_default_bootstrap(),
        metavar="HOST:PORT",
        help="the cluster's gRPC address (default: $CCR_BOOTSTRAP or 127.0.0.1:9701)",
    )
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="Kafka client properties for a secured cluster (security.protocol, "
        "ssl.ca.location, ssl.certificate.location, ssl.key.location, sasl.mechanism, "
        "sasl.username, sasl.password), as Kafka's CLI tools read them",
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="deadline of each call and of produce acknowledgements (default 30)",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, func: Callable[[argparse.Namespace], int], help_text: str) -> Any:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(func=func)
        return p

    _topic_commands(add)
    _client_commands(add)
    _namespace_commands(add)
    _link_commands(add)
    _top_command(add)
    _operation_commands(add)
    _mirror_commands(add)
    return parser


def _topic_commands(add: _Add) -> None:
    """The topics: create, list, describe, delete, configs, partitions."""
    p = add("create-topic", cmd_create_topic, "create a topic")
    p.add_argument("name", type=_non_empty)
    p.add_argument("--partitions", type=_positive_int, default=1)
    p.add_argument(
        "--config",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="topic config (repeatable), e.g. retention.ms=60000",
    )

    p = add("list-topics", cmd_list_topics, "list topics")
    p.add_argument(
        "--include-internal",
        action="store_true",
        help="also list internal topics (names starting with '_')",
    )

    p = add(
        "describe-topic",
        cmd_describe_topic,
        "show a topic's configs and partitions (log start, HW, LSO, LEO)",
    )
    p.add_argument("name", type=_non_empty)

    p = add("delete-topic", cmd_delete_topic, "delete a topic")
    p.add_argument("name", type=_non_empty)

    p = add("alter-topic-config", cmd_alter_topic_config, "set or reset topic configs")
    p.add_argument("name", type=_non_empty)
    p.add_argument("--set", type=_key_value, action="append", metavar="KEY=VALUE")
    p.add_argument(
        "--delete",
        action="append",
        metavar="KEY",
        type=_non_empty,
        help="return a config to its default (repeatable)",
    )

    p = add("create-partitions", cmd_create_partitions, "raise a topic's partition count")
    p.add_argument("name", type=_non_empty)
    p.add_argument(
        "--total", type=_positive_int, required=True, help="the new total partition count"
    )


def _client_commands(add: _Add) -> None:
    """The records and groups: produce, consume, groups, health, the cluster."""
    p = add("produce", cmd_produce, "produce one record per stdin line")
    p.add_argument("name", type=_non_empty)
    p.add_argument(
        "--key-separator",
        metavar="SEP",
        type=_non_empty,
        help="split each line into key SEP value (at the first SEP)",
    )
    p.add_argument("--partition", type=_non_negative_int)
    p.add_argument("--acks", choices=["0", "1", "-1", "all"], default="all")
    p.add_argument(
        "--header",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="header added to every record (repeatable)",
    )
    p = add("consume", cmd_consume, "print records; stops after --max-messages or when idle")
    p.add_argument("name", type=_non_empty)
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the log start (with --group: when nothing is committed)",
    )
    p.add_argument("--group", type=_non_empty, help="consume as this group and commit at the end")
    p.add_argument("--max-messages", type=_positive_int)
    p.add_argument(
        "--isolation", choices=["read_committed", "read_uncommitted"], default="read_uncommitted"
    )
    p.add_argument("--partition", type=_non_negative_int)
    p.add_argument(
        "--timeout-ms",
        type=_positive_int,
        default=5000,
        help="stop after this long without a record (default 5000)",
    )

    add("list-groups", cmd_list_groups, "list consumer groups")

    p = add(
        "describe-group",
        cmd_describe_group,
        "show a group's state, members, committed offsets and lag",
    )
    p.add_argument("group", type=_non_empty)

    p = add("health", cmd_health, "check that the cluster is serving")
    p.add_argument(
        "--wait",
        type=_non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="while the cluster cannot be reached (a daemon still starting), ask again "
        "until this long has passed (default 0: ask once)",
    )
    add("describe-cluster", cmd_describe_cluster, "show the cluster's identity and counts")
    add("whoami", cmd_whoami, "show the principal the cluster sees for this client")


def _namespace_commands(add: _Add) -> None:
    """The namespaces (spec section 2)."""

    def namespace_args(p: Any, type_required: bool = True) -> None:
        p.add_argument(
            "--type",
            type=str.lower,
            choices=NAMESPACE_TYPES,
            required=type_required,
            help="the resource type" + ("" if type_required else " (default: every type)"),
        )
        if type_required:
            p.add_argument(
                "--prefix",
                required=True,
                help='the namespace\'s prefix ("" holds every name not starting with "_")',
            )

    p = add("create-namespace", cmd_create_namespace, "create a namespace (spec section 2)")
    namespace_args(p)
    p.add_argument(
        "--reserved",
        action="store_true",
        help="reserve it: only replication may create, write, delete or commit into it",
    )

    p = add("list-namespaces", cmd_list_namespaces, "list namespaces")
    namespace_args(p, type_required=False)

    p = add(
        "describe-namespace",
        cmd_describe_namespace,
        "show a namespace, its link attachments and the topics or groups in it",
    )
    namespace_args(p)

    p = add("set-reserved", cmd_set_reserved, "reserve a namespace or clear its reservation")
    namespace_args(p)
    p.add_argument("--reserved", type=_bool, required=True, metavar="true|false")

    p = add("delete-namespace", cmd_delete_namespace, "delete a namespace (not while attached)")
    namespace_args(p)


def _link_commands(add: _Add) -> None:
    """The replication links: create, describe, attach, detach, failover, set-mode."""
    p = add(
        "create-link",
        cmd_create_link,
        "create a replication link to a remote cluster (dials it, mirrors the link there)",
    )
    p.add_argument("name", type=_non_empty)
    p.add_argument(
        "--remote",
        type=_link_address,
        required=True,
        metavar="[PROTOCOL://]HOST:PORT",
        help="the remote cluster's gRPC address (SSL:// or SASL_SSL:// dials TLS)",
    )
    _credentials_options(p)
    p.add_argument(
        "--connection",
        choices=["local", "remote"],
        default="local",
        help="which side dials from now on (default: local, this cluster)",
    )
    p.add_argument(
        "--local-bootstrap",
        default="",
        metavar="HOST:PORT",
        help="this cluster's address, for a remote that dials back",
    )
    p.add_argument(
        "--config",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        help="a shared link policy (repeatable): gap.policy=continue|stop, "
        "fetch.bound=high-watermark|last-stable-offset, "
        "failover.truncation=abort|last-stable-offset, "
        "failback.reconciliation=history|last-mirrored-offset|last-mirrored-leader-epoch",
    )

    p = add(
        "alter-link",
        cmd_alter_link,
        "change this side's own settings of a link: the address it dials, its credentials "
        "for the remote, its own address (checked with the remote first)",
    )
    p.add_argument("name", type=_non_empty)
    p.add_argument("--remote-bootstrap", type=_link_address, metavar="[PROTOCOL://]HOST:PORT")
    p.add_argument("--local-bootstrap", type=_link_address, metavar="[PROTOCOL://]HOST:PORT")
    p.add_argument(
        "--gap-policy",
        choices=("continue", "stop"),
        help="gap.policy, shared by both sides: what a follower partition does when records "
        "it must copy are gone from the source (continue: from the source's log start, the "
        "gap recorded; stop: the partition stops until resume-partition)",
    )
    p.add_argument(
        "--fetch-bound",
        choices=("high-watermark", "last-stable-offset"),
        help="fetch.bound, shared by both sides: how far an ASYNC follower copies "
        "(high-watermark: everything the source acknowledged, open transactions included; "
        "last-stable-offset: only below the source's last stable offset, as KIP-1279's "
        "mirror fetcher)",
    )
    p.add_argument(
        "--failover-truncation",
        choices=("abort", "last-stable-offset"),
        help="failover.truncation, shared by both sides: what a failover does with a follower "
        "partition's records above its last stable offset (abort: keeps them and aborts the "
        "replicated transactions left open; last-stable-offset: cuts the partition where its "
        "first open transaction began, as KIP-1279's mirror, naming the cut)",
    )
    p.add_argument(
        "--failback-reconciliation",
        choices=("history", "last-mirrored-offset", "last-mirrored-leader-epoch"),
        help="failback.reconciliation, shared by both sides: where recover cuts this cluster "
        "to follow the remote again (history: where the histories part, by provenance and "
        "leader epochs; last-mirrored-offset: where the remote's copy stopped copying from "
        "here, as KIP-1279; last-mirrored-leader-epoch: the end, in this cluster's epoch "
        "history, of the epoch of the last record the remote mirrored, never past the last "
        "mirrored offset)",
    )
    _credentials_options(p)

    p = add(
        "resume-partition",
        cmd_resume_partition,
        "let a follower partition stopped at a gap (gap.policy stop) go on from its source's "
        "log start, the gap recorded",
    )
    p.add_argument("link", type=_non_empty)
    p.add_argument("topic", type=_non_empty)
    p.add_argument("partition", type=_non_negative_int)

    add("list-links", cmd_list_links, "list replication links")

    p = add(
        "describe-link", cmd_describe_link, "show a link: mode, state, mappings, per-partition lag"
    )
    p.add_argument("name", type=_non_empty)
    p.add_argument(
        "--wait-for",
        choices=LINK_STATES,
        metavar="STATE",
        help=f"first wait until this cluster sees the link in STATE ({', '.join(LINK_STATES)})",
    )
    p.add_argument(
        "--wait",
        type=_positive_float,
        default=30.0,
        metavar="SECONDS",
        help="how long --wait-for waits before it fails with TIMED_OUT (default 30)",
    )

    p = add(
        "delete-link",
        cmd_delete_link,
        "delete a link (detaches its namespaces; followers stay reserved)",
    )
    p.add_argument("name", type=_non_empty)

    p = add("attach-namespace", cmd_attach_namespace, "attach a namespace mapping to a link")
    p.add_argument("--link", required=True, type=_non_empty)
    p.add_argument("--type", type=str.lower, choices=NAMESPACE_TYPES, required=True)
    p.add_argument("--local-prefix", required=True)
    p.add_argument("--remote-prefix", required=True)
    p.add_argument(
        "--leader", choices=["local", "remote"], required=True, help="which side's namespace leads"
    )

    p = add("detach-namespace", cmd_detach_namespace, "detach a namespace mapping from a link")
    p.add_argument("--link", required=True, type=_non_empty)
    p.add_argument("--type", type=str.lower, choices=NAMESPACE_TYPES, required=True)
    p.add_argument("--local-prefix", required=True)

    p = add(
        "failover",
        cmd_failover,
        "make this cluster's follower namespaces of a link writable (detach + unreserve)",
    )
    p.add_argument("--link", required=True, type=_non_empty)
    p.add_argument(
        "--force",
        action="store_true",
        help="fail over even though follower partitions lag (abandons the lag)",
    )
    p = add(
        "set-mode",
        cmd_set_mode,
        "switch a link to SYNC (only from FOLLOWING) or back to ASYNC (at once)",
    )
    p.add_argument("--link", required=True, type=_non_empty)
    p.add_argument("mode", choices=("sync", "async", "SYNC", "ASYNC"))


def _top_command(add: _Add) -> None:
    p = add(
        "top",
        cmd_top,
        "show every link's state and lag live, refreshed every --interval seconds until "
        "Ctrl-C (--once: one frame; --json: one JSON frame)",
    )
    p.add_argument(
        "--interval",
        type=_positive_float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between frames (default 2)",
    )
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    p.add_argument(
        "--partitions",
        type=_positive_int,
        default=10,
        metavar="N",
        help="follower partitions shown per link, the most lagging first (default 10)",
    )


def _operation_commands(add: _Add) -> None:
    """The faults, provenance, recover, reverse (docs/operations.md)."""
    p = add("fault", cmd_fault, "inject an emulated fault (for rehearsals and tests)")
    p.add_argument(
        "kind",
        choices=["unclean-election"],
        help="unclean-election: cut a partition's log and bump its leader epoch",
    )
    p.add_argument("--topic", required=True, type=_non_empty)
    p.add_argument("--partition", required=True, type=int)
    p.add_argument("--truncate-to", required=True, type=int, metavar="OFFSET")
    p = add(
        "provenance",
        cmd_provenance,
        "show each partition's provenance history, offsets and leader epoch history",
    )
    p.add_argument("topic", type=_non_empty)

    p = add(
        "recover",
        cmd_recover,
        "unclean link recovery, run on the cluster that will follow: report (or, with "
        "--confirm, carry out) the truncation to the last common offset",
    )
    p.add_argument("--link", required=True, type=_non_empty)
    p.add_argument(
        "--namespace",
        action="append",
        metavar="PREFIX[:REMOTE]",
        help="topic namespace to recover (repeatable; default: every mapping of the link)",
    )
    p.add_argument(
        "--group-namespace",
        action="append",
        metavar="PREFIX[:REMOTE]",
        help="group namespace to recover (repeatable)",
    )
    p.add_argument(
        "--confirm",
        action="store_true",
        help="truncate, move committed offsets back, and follow the remote",
    )

    p = add(
        "reverse",
        cmd_reverse,

        "reverse a link's direction with full consistency (run on the current leader)",
    )
    p.add_argument("--link", required=True, type=_non_empty)
    p.add_argument(
        "--timeout-ms",
        type=_positive_int,
        default=30000,
        help="how long to wait for the remote to hold every record (default 30000)",
    )


def _mirror_commands(add: _Add) -> None:
    """The MirrorMaker 2 mode: mirror links and the engine."""
    p = add(
        "mirror",
        cmd_mirror,
        "run MirrorMaker 2 flows from an mm2.properties file over Kafka clients",
    )
    from mirror.cli import add_arguments as add_mirror_arguments

    add_mirror_arguments(p)
    p.add_argument(
        "--create-link",
        action="store_true",
        help="do not run the engine here: store the file as a mirror link on the daemon at "
        "--bootstrap (the target cluster), which runs it (same as create-mirror-link)",
    )
    _mirror_link_arguments(p)

    p = add(
        "create-mirror-link",
        cmd_create_mirror_link,
        "store an mm2.properties file as a mirror link on the daemon of its target cluster "
        "(--bootstrap), which runs the MM2 flows into it and keeps them across restarts",
    )
    p.add_argument("--config", required=True, metavar="FILE", help="an mm2.properties file")
    _mirror_link_arguments(p)

    p = add("list-mirror-links", cmd_list_mirror_links, "list mirror links: flows, state, stats")
    p.add_argument(
        "--include-deleted", action="store_true", help="also list deleted mirror links"
    )

    p = add("delete-mirror-link", cmd_delete_mirror_link, "stop and delete a mirror link")
    p.add_argument("name", type=_non_empty)


def _fail(message: str) -> int:
    text = " ".join(message.split())
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        pass
    print(f"error: {text}", file=sys.stderr)
    return EXIT_FAILED


def _quiet_stdout() -> None:
    # After a broken pipe, make the interpreter's final flush harmless.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.security = {}
    if args.command_config is not None:
        try:
            args.security = read_command_config(args.command_config)
        except ValueError as exc:
            parser.error(str(exc))
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except CcrError as exc:
        return _fail(f"{exc.code}: {exc.message}")
    except UsageError as exc:
        _fail(str(exc))
        return EXIT_USAGE
    except CliError as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except (ValueError, TypeError, OSError) as exc:
        return _fail(str(exc) or type(exc).__name__)
    except Exception as exc:  # never a traceback
        return _fail(f"unexpected {type(exc).__name__}: {exc}")


def _exit(code: int) -> NoReturn:
    sys.exit(code)


if __name__ == "__main__":
    _exit(main())
