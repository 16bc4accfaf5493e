"""`linkd`: one simulated Kafka cluster, served over gRPC.

    linkd --cluster-id A --listen 127.0.0.1:9701 --data-dir DIR [--fsync never]
    linkd --config linkd.toml

A config file (TOML) may hold the same settings under their long option names
with underscores (`cluster_id = "A"`, `listen = "..."`, `data_dir = "..."`,
`fsync = "always"`); options on the command line win. Logs are JSON lines on
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

from linkd.core.groups import GroupConfig
from linkd.grpc_service import VERSION, add_services
from linkd.node import ClusterNode
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
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--initial-rebalance-delay-ms",
        type=int,
        help="how long a new group waits for more members (default 0)",
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
    settings["data_dir"] = Path(settings["data_dir"])
    return settings


async def serve(settings: dict[str, Any]) -> int:
    node = ClusterNode(
        settings["data_dir"],
        str(settings["cluster_id"]),
        fsync=settings["fsync"] == "always",
        group_config=GroupConfig(
            initial_rebalance_delay_ms=int(settings["initial_rebalance_delay_ms"])
        ),
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
    add_services(server, node)
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
    await server.start()
    await node.start()
    log.info(
        "serving",
        extra={
            "cluster_id": node.cluster_id,
            "listen": settings["listen"],
            "data_dir": str(settings["data_dir"]),
            "fsync": settings["fsync"],
        },
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
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
