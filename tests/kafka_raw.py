"""A Kafka client of one socket for tests that speak the wire protocol
directly (malformed, hostile or exact requests): it encodes with kio, the
codec linkd's listener uses, and keeps correlation ids."""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from linkd.kafka import codec

READ_TIMEOUT_S = 15.0


class RawClient:
    """A Kafka client of one socket: encodes with kio, keeps correlation ids."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def frame(self, key: int, version: int, body: dict[str, Any]) -> tuple[int, bytes]:
        req_cls = codec.request_class(key, version)
        assert req_cls is not None
        self.correlation += 1
        header_cls = req_cls.__header_schema__
        header = codec.make(header_cls, {"request_api_key": key, "request_api_version": version,
                                         "correlation_id": self.correlation,
                                         "client_id": "raw-test"})
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header)
        entity_writer(req_cls)(buf, codec.make(req_cls, body))
        data = buf.getvalue()
        return self.correlation, struct.pack(">i", len(data)) + data

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exactly(4))[0]
        return self._read_exactly(size)

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the server")
            out += chunk
        return bytes(out)

    def read(self, key: int, version: int, correlation: int, *, header_v0: bool = False) -> Any:
        data = self.read_frame()
        (got_correlation,) = struct.unpack_from(">i", data, 0)
        assert got_correlation == correlation
        resp_cls = codec.response_class(key, version)
        assert resp_cls is not None
        offset = 4 if header_v0 or not resp_cls.__flexible__ else 5
        body, _ = entity_reader(resp_cls)(data, offset)
        return body

    def call(self, key: int, version: int, body: dict[str, Any]) -> Any:
        correlation, data = self.frame(key, version, body)
        self.send_raw(data)
        return self.read(key, version, correlation, header_v0=key == 18)
