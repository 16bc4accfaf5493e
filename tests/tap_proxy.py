"""A TCP relay on 127.0.0.1 that keeps a copy of every byte it relays.

Tests put it between two daemons to read what crosses the wire (gRPC over
cleartext HTTP/2: protobuf fields appear as they are). Bounded: it keeps at
most MAX_KEPT bytes per direction (older bytes are dropped, counted) and
stops with `close`.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

MAX_KEPT = 64 * 1024 * 1024


class TapProxy:
    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.to_server = bytearray()  # requests
        self.to_client = bytearray()  # answers
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._sockets += [client, server]
            for src, dst, kept in ((client, server, self.to_server),
                                   (server, client, self.to_client)):
                threading.Thread(target=self._pump, args=(src, dst, kept), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, kept: bytearray) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    kept += data
                    if len(kept) > MAX_KEPT:
                        del kept[: len(kept) - MAX_KEPT]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def seen(self) -> tuple[bytes, bytes]:
        with self._lock:
            return bytes(self.to_server), bytes(self.to_client)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                s.close()

    def __enter__(self) -> TapProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
