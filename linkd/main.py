"""`linkd`: one simulated Kafka cluster, served over gRPC.

    linkd --cluster-id A --listen 127.0.0.1:9701 --data-dir DIR [--fsync never]
          [--kafka-listen 127.0.0.1:9092]
    linkd --config linkd.toml

A config file (TOML) may hold the same settings under their long option names
with underscores (`cluster_id = "A"`, `listen = "..."`, `data_dir = "..."`,
`fsync = "always"`, `kafka_listen = "127.0.0.1:9092"`); options on the
command line win. With `--kafka-listen` the daemon also serves the Apache Kafka
protocol (linkd/kafka/) on the same storage and core as gRPC. Logs are JSON lines on
stderr. SIGTERM and SIGINT shut down cleanly; exit codes: 0 clean stop, 2 bad
arguments or configuration, 3 start-up failure (port, data dir).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

from grpc import aio

from ccr.v1 import replication_pb2_grpc
from linkd.core.authorizer import AuthorizerMode, parse_super_users
from linkd.core.groups import GroupConfig
from linkd.core.links import (
    DEFAULT_LAG_MAX_MS,
    DEFAULT_LAG_MAX_RECORDS,
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    LinkLimits,
)
from linkd.core.topic_config import MAX_PARTITIONS
from linkd.grpc_service import VERSION, add_services
from linkd.kafka import limits
from linkd.kafka.server import KafkaListener
from linkd.mirror_links import MirrorLinkManager
from linkd.node import ClusterNode
from linkd.replication import LinkManager, ReplicationService
from linkd.storage.datadir import DataDirError

EXIT_USAGE = 2
EXIT_STARTUP = 3

log = logging.getLogger("linkd")

_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RESERVED:
                entry[key] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="linkd", description="One simulated Kafka cluster (gRPC).")
    p.add_argument("--config", type=Path, help="TOML file with the settings below")
    p.add_argument("--cluster-id", help="this cluster's id, fixed at first start (e.g. A)")
    p.add_argument("--listen", help="gRPC address, HOST:PORT (default 127.0.0.1:9701)")
    p.add_argument("--data-dir", type=Path, help="where topics and metadata are stored")
    p.add_argument(
        "--fsync",
        choices=["always", "never"],
        help="always (default): fsync before acknowledging; never: for benchmarks "
        "only, acknowledged records may be lost on a machine crash",
    )
    p.add_argument(
        "--kafka-listen",
        help="also serve the Kafka protocol on HOST:PORT (e.g. 127.0.0.1:9092); "
        "clients are told to connect to this address",
    )
    p.add_argument(
        "--socket-request-max-bytes",
        type=int,
        help="Kafka listener: the largest request read; a larger one closes the connection "
        "(default 104857600, as Kafka's socket.request.max.bytes)",
    )
    p.add_argument(
        "--connections-max-idle-ms",
        type=int,
        help="Kafka listener: close a connection with no traffic and nothing in flight for "
        "this long (default 600000, as Kafka's connections.max.idle.ms)",
    )
    p.add_argument(
        "--queued-max-request-bytes",
        type=int,
        help="Kafka listener: bytes of requests held (being read or waiting for their answer) "
        "across all connections; past it, connections sending large requests wait "
        "(default 536870912)",
    )
    p.add_argument(
        "--auto-create-topics",
        action="store_true",
        default=None,
        help="Kafka listener: a Metadata request for an unknown topic that allows it creates "
        "the topic, as Kafka's auto.create.topics.enable (default off)",
    )
    p.add_argument(
        "--num-partitions",
        type=int,
        help="partitions of an auto-created topic, and of one created through the Kafka "
        "listener without a count (default 1, as Kafka's num.partitions)",
    )
    p.add_argument(
        "--authorizer",
        help="acl: enforce the cluster's ACLs on every Kafka and gRPC client call, as "
        "Kafka's StandardAuthorizer (no matching ACL: denied); none (default): "
        "everything is allowed",
    )
    p.add_argument(
        "--super-users",
        help="principals allowed everything under --authorizer acl, as Kafka's "
        "super.users: 'User:admin;User:ops'",
    )
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--link-credentials",
        help="credentials a remote cluster must present to create or update a link "
        "with this cluster (default: none required)",
    )
    p.add_argument(
        "--link-session-timeout-ms",
        type=int,
        help="a link without contact this long is DISCONNECTED (default 10000)",
    )
    p.add_argument(
        "--link-lag-max-records",
        type=int,
        help="a follower partition lagging more records is CATCHING_UP (default 0)",
    )
    p.add_argument(
        "--link-lag-max-ms",
        type=int,
        help="a follower partition lagging longer is CATCHING_UP (default 30000)",
    )
    p.add_argument(
        "--link-replica-lag-time-max-ms",
        type=int,
        help="SYNC links: a follower partition not caught up for longer makes the link "
        "OUT_OF_SYNC, and acks stop waiting for it (default 30000)",
    )
    p.add_argument(
        "--initial-rebalance-delay-ms",
        type=int,
        help="how long a new group waits for more members (default 0)",
    )
    p.add_argument(
        "--plant-bug",
        choices=["ack-before-replicate"],
        help="TEST ONLY (chaos tests): plant a known bug so the checkers can be shown to "
        "catch it; ack-before-replicate: SYNC acks stop waiting for followers",
    )
    p.add_argument("--version", action="version", version=f"linkd {VERSION}")
    return p


def load_settings(argv: list[str] | None) -> dict[str, Any]:
    parser = _parser()
    args = parser.parse_args(argv)
    settings: dict[str, Any] = {
        "listen": "127.0.0.1:9701",
        "fsync": "always",
        "log_level": "info",
        "initial_rebalance_delay_ms": 0,
        "link_session_timeout_ms": DEFAULT_SESSION_TIMEOUT_MS,
        "link_credentials": "",
        "link_lag_max_records": DEFAULT_LAG_MAX_RECORDS,
        "link_lag_max_ms": DEFAULT_LAG_MAX_MS,
        "link_replica_lag_time_max_ms": DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        "plant_bug": "",
        "socket_request_max_bytes": limits.DEFAULT_SOCKET_REQUEST_MAX_BYTES,
        "connections_max_idle_ms": limits.DEFAULT_CONNECTIONS_MAX_IDLE_MS,
        "queued_max_request_bytes": limits.DEFAULT_QUEUED_MAX_REQUEST_BYTES,
        "auto_create_topics": False,
        "num_partitions": 1,
        "authorizer": "none",
        "super_users": "",
    }
    if args.config is not None:
        try:
            with args.config.open("rb") as fh:
                from_file = tomllib.load(fh)
        except OSError as exc:
            parser.exit(EXIT_USAGE, f"linkd: cannot read config file {args.config}: {exc}\n")
        except tomllib.TOMLDecodeError as exc:
            parser.exit(EXIT_USAGE, f"linkd: config file {args.config} is not valid TOML: {exc}\n")
        known = {
            "cluster_id",
            "listen",
            "data_dir",
            "fsync",
            "log_level",
            "initial_rebalance_delay_ms",
            "kafka_listen",
            "link_session_timeout_ms",
            "link_credentials",
            "link_lag_max_records",
            "link_lag_max_ms",
            "link_replica_lag_time_max_ms",
            "socket_request_max_bytes",
            "connections_max_idle_ms",
            "queued_max_request_bytes",
            "auto_create_topics",
            "num_partitions",
            "authorizer",
            "super_users",
        }
        unknown = sorted(set(from_file) - known)
        if unknown:
            parser.exit(
                EXIT_USAGE,
                f"linkd: config file {args.config}: unknown keys "
                f"{', '.join(unknown)} (known: {', '.join(sorted(known))})\n",
            )
        settings.update(from_file)
    for key in (
        "cluster_id",
        "listen",
        "data_dir",
        "fsync",
        "log_level",
        "initial_rebalance_delay_ms",
        "kafka_listen",
        "link_session_timeout_ms",
        "link_credentials",
        "link_lag_max_records",
        "link_lag_max_ms",
        "link_replica_lag_time_max_ms",
        "plant_bug",
        "socket_request_max_bytes",
        "connections_max_idle_ms",
        "queued_max_request_bytes",
        "auto_create_topics",
        "num_partitions",
        "authorizer",
        "super_users",
    ):
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    for required in ("cluster_id", "data_dir"):
        if not settings.get(required):
            parser.exit(
                EXIT_USAGE,
                f"linkd: --{required.replace('_', '-')} is required "
                "(on the command line or in --config)\n",
            )
    if settings["fsync"] not in ("always", "never"):
        parser.exit(
            EXIT_USAGE, f"linkd: fsync must be 'always' or 'never', not {settings['fsync']!r}\n"
        )
    cluster_id = str(settings["cluster_id"])
    if not cluster_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        parser.exit(
            EXIT_USAGE,
            f"linkd: cluster id {cluster_id!r} must be letters, digits, '.', '_' or '-'\n",
        )
    host, sep, port = str(settings["listen"]).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        parser.exit(EXIT_USAGE, f"linkd: --listen {settings['listen']!r} is not HOST:PORT\n")
    kafka_listen = settings.get("kafka_listen")
    if kafka_listen:
        host, sep, port = str(kafka_listen).rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            parser.exit(EXIT_USAGE, f"linkd: --kafka-listen {kafka_listen!r} is not HOST:PORT\n")
    try:
        settings["listener_limits"] = limits.ListenerLimits(
            socket_request_max_bytes=int(settings["socket_request_max_bytes"]),
            connections_max_idle_ms=int(settings["connections_max_idle_ms"]),
            queued_max_request_bytes=int(settings["queued_max_request_bytes"]),
        )
    except (TypeError, ValueError) as exc:
        parser.exit(EXIT_USAGE, f"linkd: Kafka listener limits: {exc}\n")
    if not isinstance(settings["auto_create_topics"], bool):
        parser.exit(EXIT_USAGE, "linkd: auto_create_topics must be true or false\n")
    num_partitions = settings["num_partitions"]
    if not isinstance(num_partitions, int) or not 1 <= num_partitions <= MAX_PARTITIONS:
        parser.exit(
            EXIT_USAGE,
            f"linkd: num_partitions must be in 1..{MAX_PARTITIONS}, not {num_partitions!r}\n",
        )
    _authorization_settings(parser, settings)
    settings["data_dir"] = Path(settings["data_dir"])
    return settings


def _authorization_settings(parser: argparse.ArgumentParser, settings: dict[str, Any]) -> None:
    """--authorizer and --super-users, parsed into typed values (exit 2 if bad)."""
    modes = [m.value for m in AuthorizerMode]
    try:
        settings["authorizer"] = AuthorizerMode(settings["authorizer"])
    except ValueError:
        parser.exit(
            EXIT_USAGE,
            f"linkd: --authorizer must be one of {', '.join(modes)}, "
            f"not {settings['authorizer']!r}\n",
        )
    users = settings["super_users"]
    if isinstance(users, list) and all(isinstance(u, str) for u in users):
        users = ";".join(users)  # the config file may list them
    if not isinstance(users, str):
        parser.exit(
            EXIT_USAGE,
            "linkd: super_users must be 'User:admin;User:ops' (or a list in the config file)\n",
        )
    try:
        settings["super_users"] = parse_super_users(users)
    except ValueError as exc:
        parser.exit(EXIT_USAGE, f"linkd: --super-users: {exc}\n")


async def serve(settings: dict[str, Any]) -> int:
    node = ClusterNode(
        settings["data_dir"],
        str(settings["cluster_id"]),
        fsync=settings["fsync"] == "always",
        group_config=GroupConfig(
            initial_rebalance_delay_ms=int(settings["initial_rebalance_delay_ms"])
        ),
        plant_bug=str(settings.get("plant_bug") or ""),
    )
    node.authz.mode = settings["authorizer"]
    node.authz.super_users = settings["super_users"]
    node.state.links.limits = LinkLimits(
        session_timeout_ms=int(settings["link_session_timeout_ms"]),
        lag_max_records=int(settings["link_lag_max_records"]),
        lag_max_ms=int(settings["link_lag_max_ms"]),
        replica_lag_time_max_ms=int(settings["link_replica_lag_time_max_ms"]),
    )
    try:
        node.open()
    except DataDirError as exc:
        log.error("cannot open data dir", extra={"error": str(exc)})
        print(f"linkd: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    server = aio.server(
        options=[
            ("grpc.max_receive_message_length", 128 * 1024 * 1024),
            ("grpc.max_send_message_length", 128 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ]
    )
    links = LinkManager(node, str(settings["link_credentials"]))
    mirror_links = MirrorLinkManager(node)
    add_services(server, node, links, mirror_links)
    replication_pb2_grpc.add_ReplicationServicer_to_server(ReplicationService(node, links), server)
    try:
        port = server.add_insecure_port(settings["listen"])
    except RuntimeError as exc:
        port = 0
        reason = str(exc)
    else:
        reason = "address in use or not available"
    if port == 0:
        print(f"linkd: cannot listen on {settings['listen']}: {reason}", file=sys.stderr)
        await node.stop()
        return EXIT_STARTUP
    kafka: KafkaListener | None = None
    if settings.get("kafka_listen"):
        host, _, kport = str(settings["kafka_listen"]).rpartition(":")
        kafka = KafkaListener(
            node,
            host.strip("[]"),
            int(kport),
            limits=settings["listener_limits"],
            auto_create_topics=bool(settings["auto_create_topics"]),
            num_partitions=int(settings["num_partitions"]),
        )
        try:
            await kafka.start()
        except OSError as exc:
            print(
                f"linkd: cannot listen for Kafka clients on {settings['kafka_listen']}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
            await server.stop(grace=None)
            await node.stop()
            return EXIT_STARTUP
    await server.start()
    await node.start()
    links.start()
    # After the Kafka listener: a mirror link's engine writes into this cluster through it.
    mirror_links.start()
    log.info(
        "serving",
        extra={
            "cluster_id": node.cluster_id,
            "listen": settings["listen"],
            "data_dir": str(settings["data_dir"]),
            "fsync": settings["fsync"],
            "kafka_listen": settings.get("kafka_listen") or "",
            "authorizer": node.authz.mode.value,
            "super_users": ";".join(sorted(node.authz.super_users)),
        },
    )
    if node.authz.super_users and not node.authz.enabled:
        log.warning("--super-users has no effect without --authorizer acl")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    # Before the Kafka listener: the engines flush their producers into it.
    await mirror_links.stop()
    if kafka is not None:
        await kafka.stop()
    await links.stop()
    await server.stop(grace=2.0)
    await node.stop()
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    settings = load_settings(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=str(settings["log_level"]).upper(), handlers=[handler])
    return asyncio.run(serve(settings))


if __name__ == "__main__":
    raise SystemExit(main())
