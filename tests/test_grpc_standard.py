"""The standard health service follows a daemon's life (linkd/grpc_standard.py),
and the daemon's settings for the standard services and Kafka's defaults."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from linkd.core.groups import KAFKA_INITIAL_REBALANCE_DELAY_MS
from linkd.grpc_standard import Health
from linkd.main import SERVICES, load_settings

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def _statuses(stub: health_pb2_grpc.HealthStub) -> list[int]:
    return [
        (await stub.Check(health_pb2.HealthCheckRequest(service=s), timeout=10)).status
        for s in ("", *SERVICES)
    ]


def test_health__not_serving_until_recovered__serving__not_serving_for_good_once_stopping(
) -> None:
    async def story() -> list[list[int]]:
        server = aio.server()
        health = Health(SERVICES)
        await health.starting(server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        seen = []
        try:
            async with aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                seen.append(await _statuses(stub))  # listener open, recovery not done
                await health.serving()
                seen.append(await _statuses(stub))
                await health.stopping()
                seen.append(await _statuses(stub))
                await health.serving()  # too late: stopping is for good
                seen.append(await _statuses(stub))
        finally:
            await server.stop(None)
        return seen

    n = len(SERVICES) + 1
    assert asyncio.run(story()) == [[NOT_SERVING] * n, [SERVING] * n, [NOT_SERVING] * n,
                                    [NOT_SERVING] * n]


def _settings(tmp_path: Path, *args: str) -> dict[str, object]:
    return load_settings(["--cluster-id", "A", "--data-dir", str(tmp_path), *args])


def test_daemon_defaults__kafka_rebalance_delay__reflection_on(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert settings["initial_rebalance_delay_ms"] == KAFKA_INITIAL_REBALANCE_DELAY_MS == 3000
    assert settings["grpc_reflection"] == "on"
    assert _settings(tmp_path, "--grpc-reflection", "off")["grpc_reflection"] == "off"
    config = tmp_path / "linkd.toml"
    config.write_text('grpc_reflection = "maybe"\n')
    with pytest.raises(SystemExit) as refused:
        _settings(tmp_path, "--config", str(config))
    assert refused.value.code == 2

