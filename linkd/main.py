"""`linkd`: one simulated Kafka cluster, served over gRPC.

    linkd --cluster-id A --listen 127.0.0.1:9701 --data-dir DIR [--fsync never]
          [--kafka-listen 127.0.0.1:9092]
    linkd --cluster-id A --listen SASL_SSL://127.0.0.1:9701 --data-dir DIR
          --tls-cert server.crt --tls-key server.key [--tls-client-ca ca.crt]
    linkd --config linkd.toml
    linkd ... --kafka-listen SASL_SSL://127.0.0.1:9093,SSL://127.0.0.1:9094
          --tls-cert server.pem --tls-key server.key [--tls-client-ca ca.pem]
          --sasl-users users.txt [--sasl-enabled-mechanisms SCRAM-SHA-512]

`--listen` takes Kafka's listener names as a prefix (PLAINTEXT, the default
for a bare HOST:PORT; SSL; SASL_PLAINTEXT; SASL_SSL): linkd/grpc_auth.py and
docs/security.md.

A config file (TOML) may hold the same settings under their long option names
with underscores (`cluster_id = "A"`, `listen = "..."`, `data_dir = "..."`,
`fsync = "always"`, `kafka_listen = "127.0.0.1:9092"`); options on the
command line win. With `--kafka-listen` the daemon also serves the Apache Kafka
protocol (linkd/kafka/) on the same storage and core as gRPC. With
`--metrics-listen HOST:PORT` it serves Prometheus metrics over HTTP
(linkd/metrics.py, docs/metrics.md). Logs are JSON lines on stderr. SIGTERM
and SIGINT shut down cleanly; exit codes: 0 clean stop, 2 bad arguments or
configuration, 3 start-up failure (port, metrics port, data dir).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from grpc import aio

from ccr.v1 import admin_pb2, cluster_pb2, replication_pb2
from linkd import ack_trace
from linkd.core import link_rounds as rounds
from linkd.core.authorizer import AuthorizerMode, parse_super_users
from linkd.core.cluster import RETENTION_CHECK_INTERVAL_MS
from linkd.core.faults import Faults, PlantedBug
from linkd.core.groups import KAFKA_INITIAL_REBALANCE_DELAY_MS, GroupConfig
from linkd.core.link_metrics import link_samples
from linkd.core.links import (
    DEFAULT_LAG_MAX_MS,
    DEFAULT_LAG_MAX_RECORDS,
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    LinkLimits,
)
from linkd.core.topic_config import MAX_PARTITIONS
from linkd.grpc_auth import (
    Listener,
    SaslInterceptor,
    parse_listener,
    server_credentials,
    tls_files_problem,
)
from linkd.grpc_service import VERSION, add_services
from linkd.grpc_standard import HEALTH_SERVICE, Health, add_reflection
from linkd.kafka import limits
from linkd.kafka.sasl import DEFAULT_MECHANISMS
from linkd.kafka.security import (
    ListenerAddress,
    ListenerSecurity,
    TlsFiles,
    parse_listeners,
    parse_mechanisms,
    read_users_file,
)
from linkd.kafka.server import KafkaListener
from linkd.link_channels import LinkTls
from linkd.link_sessions import CredentialsSource, LinkSecurity
from linkd.log_cleaner import DEFAULT_BACKOFF_MS, DEFAULT_BYTES_PER_PASS, CleanerSettings
from linkd.metrics import (
    Snapshot,
    StateCollector,
    mirror_rows,
    on_loop,
    parse_address,
    serve_metrics,
)
from linkd.mirror_links import MirrorLinkManager
from linkd.node import ClusterNode
from linkd.replication import (
    FETCH_MAX_WAIT_MS,
    LinkManager,
    ReplicationService,
    add_replication_service,
)
from linkd.secret_box import SecretBox
from linkd.storage.datadir import DataDirError

# The daemon's own gRPC services, as health and reflection name them.
SERVICES = (
    cluster_pb2.DESCRIPTOR.services_by_name["Cluster"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
    replication_pb2.DESCRIPTOR.services_by_name["Replication"].full_name,
)

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
    p.add_argument(
        "--listen",
        help="gRPC address, [PROTOCOL://]HOST:PORT (default 127.0.0.1:9701); PROTOCOL is "
        "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL, as Kafka's listener names",
    )
    p.add_argument(
        "--tls-cert",
        type=Path,
        help="PEM certificate (chain) of TLS listeners, gRPC and Kafka (SSL, SASL_SSL)",
    )
    p.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    p.add_argument(
        "--tls-client-ca",
        type=Path,
        help="PEM CA certificates: SSL listeners (gRPC and Kafka) require a client "
        "certificate one of them signed, and its subject is the principal (mTLS; SASL_SSL "
        "listeners ask for none)",
    )
    p.add_argument(
        "--link-tls-ca",
        type=Path,
        help="PEM CA certificates that link partners' TLS listeners are checked against, "
        "for remote addresses written SSL://HOST:PORT or SASL_SSL://HOST:PORT (default: the "
        "system's roots); --tls-cert/--tls-key are presented as the client certificate",
    )
    p.add_argument("--data-dir", type=Path, help="where topics and metadata are stored")
    p.add_argument(
        "--fsync",
        choices=["always", "never"],
        help="always (default): fsync before acknowledging; never: for benchmarks "
        "only, acknowledged records may be lost on a machine crash",
    )
    p.add_argument(
        "--log-cleaner-backoff-ms",
        type=int,
        help="the log cleaner of compacted topics sleeps this long between passes "
        f"(default {DEFAULT_BACKOFF_MS}, Kafka's log.cleaner.backoff.ms)",
    )
    p.add_argument(
        "--log-cleaner-io-bytes-per-pass",
        type=int,
        help="the most bytes the log cleaner reads and writes in one pass; a larger segment "
        f"is still cleaned, alone (default {DEFAULT_BYTES_PER_PASS})",
    )
    p.add_argument(
        "--kafka-listen",
        help="also serve the Kafka protocol on [PROTOCOL://]HOST:PORT[,...] (e.g. "
        "127.0.0.1:9092 or SASL_SSL://127.0.0.1:9093); PROTOCOL is PLAINTEXT (default), SSL, "
        "SASL_PLAINTEXT or SASL_SSL; clients are told to connect to the address they used",
    )
    p.add_argument(
        "--sasl-users",
        type=Path,
        help="Kafka listener: a file of name:password lines; each user gets SCRAM-SHA-256 and "
        "SCRAM-SHA-512 credentials at start (stored hashed)",
    )
    p.add_argument(
        "--sasl-enabled-mechanisms",
        help="Kafka listener: SASL mechanisms offered (default PLAIN,SCRAM-SHA-256,SCRAM-SHA-512)",
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
    p.add_argument("--link-credentials", help=argparse.SUPPRESS)  # refused: see load_settings
    p.add_argument(
        "--link-credentials-file",
        help="the link credentials a remote cluster must prove it holds to open a link "
        "session with this cluster, one per line (several while rotating; re-read when the "
        "file changes); or CCR_LINK_CREDENTIALS (default: none required)",
    )
    p.add_argument(
        "--password-encoder-secret-file",
        help="the secret that seals stored link credentials and keys, as Kafka's "
        "password.encoder.secret; or CCR_PASSWORD_ENCODER_SECRET (default: one generated "
        "into the data dir at first start)",
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
        help="how long a new group waits for more members (Kafka's "
        f"group.initial.rebalance.delay.ms; default {KAFKA_INITIAL_REBALANCE_DELAY_MS})",
    )
    p.add_argument(
        "--log-retention-check-interval-ms",
        type=int,
        help="how often retention deletes the whole segments it is owed (Kafka's "
        f"log.retention.check.interval.ms; default {RETENTION_CHECK_INTERVAL_MS}; the first "
        "check one interval after the start)",
    )
    p.add_argument(
        "--grpc-reflection",
        choices=["on", "off"],
        help="serve gRPC server reflection (v1 and v1alpha: the service list and the "
        "schema of proto/, without credentials; default on; docs/grpc.md)",
    )
    p.add_argument(
        "--metrics-listen",
        help="serve Prometheus metrics over HTTP on HOST:PORT (/metrics; off by default; "
        "docs/metrics.md)",
    )
    p.add_argument(
        "--plant-bug",
        choices=[bug.value for bug in PlantedBug],
        help="TEST ONLY (chaos tests): plant a known bug so the checkers can be shown to "
        "catch it; ack-before-replicate: SYNC acks stop waiting for followers",
    )
    p.add_argument("--version", action="version", version=f"linkd {VERSION}")
    return p


def _security_settings(settings: dict[str, Any]) -> None:
    """The Kafka listeners and what each requires (settings["kafka_listeners"]:
    (address, ListenerSecurity) pairs), and the users of --sasl-users
    (settings["sasl_user_list"]); ValueError or OSError naming what is wrong."""
    text = settings.get("kafka_listen")
    addresses = parse_listeners(str(text)) if text else []
    cert, key, client_ca = (settings.get(k) for k in ("tls_cert", "tls_key", "tls_client_ca"))
    if bool(cert) != bool(key):
        raise ValueError("--tls-cert and --tls-key go together")
    if client_ca and not cert:
        raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = None
    if cert:
        ca = Path(str(client_ca)) if client_ca else None
        tls = TlsFiles(Path(str(cert)), Path(str(key)), ca)
    mechanisms = parse_mechanisms(
        str(settings.get("sasl_enabled_mechanisms") or ",".join(DEFAULT_MECHANISMS))
    )
    settings["kafka_listeners"] = [
        (a, ListenerSecurity.of(a.protocol, tls, mechanisms)) for a in addresses
    ]
    users = settings.get("sasl_users")
    settings["sasl_user_list"] = read_users_file(Path(users)) if users else []


# The settings a --config file may hold (the long options, with underscores);
# each also comes from the command line, which wins.
FILE_SETTINGS = (
    "cluster_id",
    "listen",
    "data_dir",
    "fsync",
    "log_level",
    "initial_rebalance_delay_ms",
    "log_retention_check_interval_ms",
    "grpc_reflection",
    "kafka_listen",
    "link_session_timeout_ms",
    "link_credentials_file",
    "password_encoder_secret_file",
    "link_lag_max_records",
    "link_lag_max_ms",
    "link_replica_lag_time_max_ms",
    "socket_request_max_bytes",
    "connections_max_idle_ms",
    "queued_max_request_bytes",
    "auto_create_topics",
    "num_partitions",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "link_tls_ca",
    "sasl_users",
    "sasl_enabled_mechanisms",
    "authorizer",
    "super_users",
    "metrics_listen",
    "log_cleaner_backoff_ms",
    "log_cleaner_io_bytes_per_pass",
)


def _int_setting(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not {value!r}")
    return value


def load_settings(argv: list[str] | None) -> dict[str, Any]:
    parser = _parser()
    args = parser.parse_args(argv)
    settings: dict[str, Any] = {
        "listen": "127.0.0.1:9701",
        "fsync": "always",
        "log_level": "info",
        "initial_rebalance_delay_ms": KAFKA_INITIAL_REBALANCE_DELAY_MS,
        "log_retention_check_interval_ms": RETENTION_CHECK_INTERVAL_MS,
        "grpc_reflection": "on",
        "link_session_timeout_ms": DEFAULT_SESSION_TIMEOUT_MS,
        "link_credentials_file": "",
        "password_encoder_secret_file": "",
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
        "log_cleaner_backoff_ms": DEFAULT_BACKOFF_MS,
        "log_cleaner_io_bytes_per_pass": DEFAULT_BYTES_PER_PASS,
    }
    if args.config is not None:
        try:
            with args.config.open("rb") as fh:
                from_file = tomllib.load(fh)
        except OSError as exc:
            parser.exit(EXIT_USAGE, f"linkd: cannot read config file {args.config}: {exc}\n")
        except tomllib.TOMLDecodeError as exc:
            parser.exit(EXIT_USAGE, f"linkd: config file {args.config} is not valid TOML: {exc}\n")
        known = set(FILE_SETTINGS)
        unknown = sorted(set(from_file) - known)
        if unknown:
            parser.exit(
                EXIT_USAGE,
                f"linkd: config file {args.config}: unknown keys "
                f"{', '.join(unknown)} (known: {', '.join(sorted(known))})\n",
            )
        settings.update(from_file)
    for key in (*FILE_SETTINGS, "plant_bug"):  # plant_bug: the command line only
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    if args.link_credentials is not None or "link_credentials" in settings:
        parser.exit(
            EXIT_USAGE,
            "linkd: --link-credentials is no longer accepted: a secret on the command line is "
            "visible to every local user; give it in a file (--link-credentials-file FILE) or "
            "in CCR_LINK_CREDENTIALS\n",
        )
    for required in ("cluster_id", "data_dir"):
        if not settings.get(required):
            parser.exit(
                EXIT_USAGE,
                f"linkd: --{required.replace('_', '-')} is required "
                "(on the command line or in --config)\n",
            )
    if settings["grpc_reflection"] not in ("on", "off"):
        parser.exit(
            EXIT_USAGE,
            f"linkd: grpc_reflection must be 'on' or 'off', not {settings['grpc_reflection']!r}\n",
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
    try:
        settings["grpc_listener"] = parse_listener(str(settings["listen"]))
    except ValueError as exc:
        parser.exit(EXIT_USAGE, f"linkd: --listen {settings['listen']!r}: {exc}\n")
    _check_tls_settings(parser, settings)
    try:
        _security_settings(settings)
    except (ValueError, OSError) as exc:
        parser.exit(EXIT_USAGE, f"linkd: {exc}\n")
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
    interval = settings["log_retention_check_interval_ms"]
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        parser.exit(
            EXIT_USAGE,
            f"linkd: log_retention_check_interval_ms must be an integer of at least 1, "
            f"not {interval!r}\n",
        )
    try:
        settings["cleaner_settings"] = CleanerSettings(
            backoff_ms=_int_setting(settings["log_cleaner_backoff_ms"], "log_cleaner_backoff_ms"),
            bytes_per_pass=_int_setting(
                settings["log_cleaner_io_bytes_per_pass"], "log_cleaner_io_bytes_per_pass"
            ),
        )
    except ValueError as exc:
        parser.exit(EXIT_USAGE, f"linkd: {exc}\n")
    if settings.get("metrics_listen"):
        try:
            settings["metrics_address"] = parse_address(str(settings["metrics_listen"]))
        except ValueError as exc:
            parser.exit(EXIT_USAGE, f"linkd: --metrics-listen: {exc}\n")
    settings["data_dir"] = Path(settings["data_dir"])
    return settings


def _check_tls_settings(parser: argparse.ArgumentParser, settings: dict[str, Any]) -> None:
    """TLS files are readable PEM; a TLS gRPC listener has its certificate and key."""
    for key in ("tls_cert", "tls_key", "tls_client_ca", "link_tls_ca"):
        if settings.get(key):
            path = Path(settings[key])
            settings[key] = path
            try:
                text = path.read_bytes()
            except OSError as exc:
                parser.exit(EXIT_USAGE, f"linkd: --{key.replace('_', '-')} {path}: {exc}\n")
            if b"-----BEGIN " not in text:
                parser.exit(
                    EXIT_USAGE, f"linkd: --{key.replace('_', '-')} {path}: not a PEM file\n"
                )
    if settings.get("tls_cert") and settings.get("tls_key"):
        problem = tls_files_problem(settings["tls_cert"], settings["tls_key"])
        if problem is not None:
            parser.exit(EXIT_USAGE, f"linkd: {problem}\n")
    listener: Listener = settings["grpc_listener"]
    if listener.tls and not (settings.get("tls_cert") and settings.get("tls_key")):
        parser.exit(
            EXIT_USAGE,
            f"linkd: --listen {listener}: a {listener.protocol} listener needs --tls-cert "
            "and --tls-key\n",
        )


def _add_grpc_port(server: aio.Server, settings: dict[str, Any]) -> int:
    """Binds the gRPC listener; 0 when the address is not available."""
    listener: Listener = settings["grpc_listener"]
    if not listener.tls:
        return server.add_insecure_port(listener.address)
    # As Kafka's ssl.client.auth: SSL listeners require the client certificate;
    # SASL_SSL listeners ask for none (the principal is the SASL user).
    client_ca = settings.get("tls_client_ca") if listener.protocol == "SSL" else None
    creds = server_credentials(settings["tls_cert"], settings["tls_key"], client_ca or None)
    return server.add_secure_port(listener.address, creds)


def _sasl(node: ClusterNode, listener: Listener) -> SaslInterceptor | None:
    """SASL listeners authenticate every client call against the user store."""
    return SaslInterceptor(lambda: node.state.users) if listener.sasl else None


SASL_USERS_ITERATIONS = 4096


async def _bootstrap_users(node: ClusterNode, users: list[tuple[str, str]]) -> None:
    """--sasl-users: each user's credentials, unless the stored ones verify
    its password already (a restart writes nothing)."""
    changed = 0
    for name, password in users:
        changed += await node.set_user_password(name, password, SASL_USERS_ITERATIONS)
    if users:
        log.info("sasl users", extra={"users": len(users), "changed": changed})


def _kafka_listener(
    node: ClusterNode,
    settings: dict[str, Any],
    address: ListenerAddress,
    security: ListenerSecurity,
) -> KafkaListener:
    return KafkaListener(
        node,
        address.host,
        address.port,
        limits=settings["listener_limits"],
        auto_create_topics=bool(settings["auto_create_topics"]),
        num_partitions=int(settings["num_partitions"]),
        security=security,
    )


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


def _serve_metrics(
    node: ClusterNode,
    mirror_links: MirrorLinkManager,
    security: LinkSecurity,
    address: tuple[str, int],
) -> WSGIServer:
    """--metrics-listen: the event metrics and, read at each scrape on the
    event loop, the links' and mirror links' (linkd/metrics.py)."""
    loop = asyncio.get_running_loop()

    def snapshot() -> Snapshot:
        links = link_samples(node.state, node.clock())
        mirrors = [
            row
            for name, worker in sorted(mirror_links.workers.items())
            for row in mirror_rows(name, worker.metric_rows())
        ]
        refused = sorted((str(k), n) for k, n in security.sessions.refusals.items())
        return Snapshot(tuple(links), tuple(mirrors), tuple(refused))

    node.metrics.registry.register(StateCollector(lambda: on_loop(loop, snapshot), VERSION))
    return serve_metrics(node.metrics.registry, *address)


def _stop_metrics(server: WSGIServer) -> None:
    server.shutdown()
    server.server_close()


async def serve(settings: dict[str, Any]) -> int:
    node = ClusterNode(
        settings["data_dir"],
        str(settings["cluster_id"]),
        fsync=settings["fsync"] == "always",
        group_config=GroupConfig(
            initial_rebalance_delay_ms=int(settings["initial_rebalance_delay_ms"])
        ),
        faults=Faults.planting(str(settings.get("plant_bug") or "")),
        cleaner_settings=settings["cleaner_settings"],
    )
    node.state.retention_check_interval_ms = int(settings["log_retention_check_interval_ms"])
    node.authz.mode = settings["authorizer"]
    node.authz.super_users = settings["super_users"]
    node.state.links.limits = LinkLimits(
        session_timeout_ms=int(settings["link_session_timeout_ms"]),
        lag_max_records=int(settings["link_lag_max_records"]),
        lag_max_ms=int(settings["link_lag_max_ms"]),
        replica_lag_time_max_ms=int(settings["link_replica_lag_time_max_ms"]),
        fetch_silence_ms=rounds.fetch_silence_ms(FETCH_MAX_WAIT_MS),
        fetch_answer_due_ms=rounds.fetch_answer_due_ms(FETCH_MAX_WAIT_MS),
    )
    try:
        node.open()
    except DataDirError as exc:
        log.error("cannot open data dir", extra={"error": str(exc)})
        print(f"linkd: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    listener: Listener = settings["grpc_listener"]
    sasl = _sasl(node, listener)
    server = aio.server(
        interceptors=[sasl] if sasl is not None else [],
        options=[
            ("grpc.max_receive_message_length", 128 * 1024 * 1024),
            ("grpc.max_send_message_length", 128 * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ]
    )
    try:
        security = LinkSecurity(
            SecretBox.for_daemon(
                settings["data_dir"], str(settings["password_encoder_secret_file"])
            ),
            CredentialsSource(str(settings["link_credentials_file"])),
            node.cluster_id,
            LinkTls.from_files(
                settings.get("link_tls_ca"), settings.get("tls_cert"), settings.get("tls_key")
            ),
        )
    except (OSError, ValueError) as exc:
        print(f"linkd: cannot read the link secrets: {exc}", file=sys.stderr)
        await node.stop()
        return EXIT_USAGE
    security.credentials_mandatory = node.authz.enabled
    links = LinkManager(node, security)
    mirror_links = MirrorLinkManager(node)
    add_services(server, node, links, mirror_links)
    add_replication_service(server, ReplicationService(node, links))
    # The standard services: health from NOT_SERVING, and reflection unless turned off.
    health = Health(SERVICES)
    await health.starting(server)
    if settings["grpc_reflection"] == "on":
        add_reflection(server, (*SERVICES, HEALTH_SERVICE))
    try:
        port = _add_grpc_port(server, settings)
    except RuntimeError as exc:
        port = 0
        reason = str(exc)
    else:
        reason = "address in use or not available"
    if port == 0:
        print(f"linkd: cannot listen on {settings['listen']}: {reason}", file=sys.stderr)
        await node.stop()
        return EXIT_STARTUP
    metrics_server = None
    if settings.get("metrics_address"):
        try:
            metrics_server = _serve_metrics(
                node, mirror_links, security, settings["metrics_address"]
            )
        except OSError as exc:
            print(
                f"linkd: cannot serve metrics on {settings['metrics_listen']}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
            await server.stop(grace=None)
            await node.stop()
            return EXIT_STARTUP
    await _bootstrap_users(node, settings["sasl_user_list"])
    kafkas: list[KafkaListener] = []
    for address, security in settings["kafka_listeners"]:
        kafka = _kafka_listener(node, settings, address, security)
        kafkas.append(kafka)
        try:
            await kafka.start()
        except OSError as exc:
            print(
                f"linkd: cannot listen for Kafka clients on {address}: {exc.strerror or exc}",
                file=sys.stderr,
            )
            for started in kafkas[:-1]:
                await started.stop()
            if metrics_server is not None:
                _stop_metrics(metrics_server)
            await server.stop(grace=None)
            await node.stop()
            return EXIT_STARTUP
    if ack_trace.start(node.cluster_id):
        log.warning("tracing acknowledgements", extra={"file": os.environ[ack_trace.ENV]})
    await server.start()
    await node.start()
    links.start()
    # After the Kafka listener: a mirror link's engine writes into this cluster through it.
    mirror_links.start()
    await health.serving()
    log.info(
        "serving",
        extra={
            "cluster_id": node.cluster_id,
            "listen": str(listener),
            "data_dir": str(settings["data_dir"]),
            "fsync": settings["fsync"],
            "kafka_listen": settings.get("kafka_listen") or "",
            "authorizer": node.authz.mode.value,
            "super_users": ";".join(sorted(node.authz.super_users)),
            "metrics_listen": settings.get("metrics_listen") or "",
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
    # First, so that probes and balancers stop sending calls while the rest stops.
    await health.stopping()
    # Before the Kafka listener: the engines flush their producers into it.
    await mirror_links.stop()
    for kafka in kafkas:
        await kafka.stop()
    await links.stop()
    await server.stop(grace=2.0)
    if metrics_server is not None:
        _stop_metrics(metrics_server)
    await node.stop()
    ack_trace.stop()
    if sasl is not None:
        refused = dict(sorted(sasl.refusals.counts.items()))
        log.info("gRPC calls refused unauthenticated", extra={"by_reason": json.dumps(refused)})
    log.info("stopped")
    return 0


def log_thread_exception(args: threading.ExceptHookArgs) -> None:
    """A thread's uncaught exception as one log record (one JSON line), not
    Python's raw traceback on stderr."""
    error = args.exc_value if args.exc_value is not None else args.exc_type()
    log.error(
        "thread failed",
        exc_info=(args.exc_type, error, args.exc_traceback),
        extra={"thread_name": args.thread.name if args.thread is not None else ""},
    )


def main(argv: list[str] | None = None) -> int:
    settings = load_settings(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=str(settings["log_level"]).upper(), handlers=[handler])
    # Every line on stderr is one JSON object: Python's warnings and threads'
    # uncaught exceptions go through the logger too.
    logging.captureWarnings(True)
    threading.excepthook = log_thread_exception
    return asyncio.run(serve(settings))


if __name__ == "__main__":
    raise SystemExit(main())
