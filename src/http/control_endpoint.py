"""The coordinator's control endpoint: the HTTP server with the API's handlers, announced in the
token file's record while it listens (so that local clients find it)."""

from __future__ import annotations

import logging
import os

from ..supervisor.coordinator import Coordinator
from . import tokenfile
from .access import Access
from .handlers import CoordinatorApi
from .server import HttpServer

log = logging.getLogger("pumpd.coordinator")


class HttpControlEndpoint:
    """:class:`pumpd.supervisor.coordinator.ControlEndpoint` over HTTP(S) at ``host:port``."""

    def __init__(self, coordinator: Coordinator, access: Access, host: str, port: int) -> None:
        self._access = access
        self._server = HttpServer(CoordinatorApi(coordinator), access)
        self._host, self._port = host, port
        self._address: tuple[str, int] | None = None
        self.tls = access.tls is not None

    async def start(self) -> tuple[str, int]:
        try:
            self._address = await self._server.start(self._host, self._port)
        except OSError as exc:
            log.error("cannot listen on %s:%d for the status endpoint: %s (use --http "
                      "HOST:PORT or --http off)", self._host, self._port, exc.strerror or exc)
            raise
        trouble = tokenfile.announce(self._address[1], self._access.token_file, self.tls,
                                     self._access.tls_cert)
        if trouble:
            log.warning("%s", trouble)
        return self._address

    async def close(self) -> None:
        await self._server.close()
        if self._address is not None:
            tokenfile.remove_record(self._address[1], os.getpid())

    def describe(self) -> str:
        if self._address is None:
            return "off"
        scheme = "https" if self.tls else "http"
        return (f"{scheme}://{self._address[0]}:{self._address[1]} (token file "
                f"{os.path.abspath(self._access.token_file)})")
