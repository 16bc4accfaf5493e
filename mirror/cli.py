"""The `mirror` command: run MirrorMaker 2 flows from an `mm2.properties` file.

    ccr-admin mirror --config mm2.properties [--json] [--duration-s S] [--once]
    python -m mirror --config mm2.properties ...

Rules:
- The file is read as is; every configuration warning (unknown keys, keys at a
  level MM2 ignores, duplicates) is printed with its line before anything runs.
  An invalid value is an error (exit 2) naming key, line and value.
- The flows are printed (source->target, replicating or heartbeats only,
  exactly-once or not), then the mirror runs until SIGINT/SIGTERM or
  `--duration-s`, printing MM2's metrics every `--metrics-interval-s`.
- `--once` copies what the sources hold now, emits checkpoints and group
  offsets once, and exits: 0 when every partition was copied to its end, 1 when
  the timeout (`--once-timeout-s`) came first.
- `--json` prints one JSON object per line: config, metrics, done.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any

from linkd.core.mirror.config import MirrorConfigError, MirrorMakerConfig

__all__ = ["add_arguments", "main", "run"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="an mm2.properties file")
    parser.add_argument("--duration-s", type=_positive_float, default=None, metavar="S",
                        help="stop after S seconds (default: until SIGINT/SIGTERM)")
    parser.add_argument("--once", action="store_true",
                        help="copy what is there now, checkpoint once, exit")
    parser.add_argument("--once-timeout-s", type=_positive_float, default=120.0, metavar="S",
                        help="with --once: give up copying after S seconds (default 120)")
    parser.add_argument("--metrics-interval-s", type=_positive_float, default=10.0, metavar="S",
                        help="how often to print metrics (default 10)")


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=True), flush=True)


def _flow_rows(config: MirrorMakerConfig) -> list[dict[str, Any]]:
    return [
        {
            "flow": f.name,
            "replicates": f.enabled,
            "exactly_once": f.exactly_once,
            "heartbeats": f.emit_heartbeats_enabled,
            "checkpoints": f.emit_checkpoints_enabled,
            "sync_group_offsets": f.sync_group_offsets_enabled,
        }
        for f in config.flows
    ]


def _metric_line(row: dict[str, Any]) -> str:
    tags = " ".join(
        f"{k}={row[k]}"
        for k in ("target", "source", "consumer_group", "topic", "partition")
        if k in row
    )
    values = " ".join(
        f"{name}={'-' if v is None else round(v, 1)}" for name, v in row["metrics"].items()
    )
    return f"metrics {row['flow']} {row['group']} {tags} {values}"


def run(args: argparse.Namespace) -> int:
    # Imported here: the engine needs confluent-kafka, the config alone does not.
    from mirror.runner import MirrorRunner, load_config

    as_json: bool = bool(getattr(args, "json", False))
    try:
        config = load_config(args.config)
    except MirrorConfigError as exc:
        print(f"error: {args.config}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if as_json:
        _emit({
            "event": "config",
            "warnings": [{"line": w.line, "key": w.key, "message": w.message}
                         for w in config.warnings],
            "flows": _flow_rows(config),
        })
    else:
        for w in config.warnings:
            print(f"warning: {args.config}: {w}", flush=True)
        for row in _flow_rows(config):
            mode = "replicates" if row["replicates"] else "heartbeats only"
            eos = ", exactly-once" if row["exactly_once"] else ""
            print(f"flow {row['flow']}: {mode}{eos}", flush=True)

    def report(message: str) -> None:
        if as_json:
            _emit({"event": "log", "message": message})
        else:
            print(message, flush=True)

    def on_metrics(rows: list[dict[str, Any]]) -> None:
        if as_json:
            _emit({"event": "metrics", "metrics": rows})
        else:
            for row in rows:
                print(_metric_line(row), flush=True)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    runner = MirrorRunner(config, report=report)
    try:
        runner.start()
        if args.once:
            result = runner.run_once(args.once_timeout_s)
            on_metrics(runner.metrics())
        else:
            result = runner.run(stop, duration_s=args.duration_s,
                                metrics_interval_s=args.metrics_interval_s,
                                on_metrics=on_metrics)
    finally:
        runner.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if as_json:
        _emit({"event": "done", "caught_up": result.caught_up, "stats": result.stats})
    else:
        for name, stats in sorted(result.stats.items()):
            text = " ".join(f"{k}={v}" for k, v in sorted(stats.items()))
            print(f"done {name}: {text}", flush=True)
    if args.once and not result.caught_up:
        print("error: the sources were not copied to their end in time", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mirror",
        description="Run MirrorMaker 2 flows from an mm2.properties file over Kafka clients.",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_arguments(parser)
    return run(parser.parse_args(argv))
