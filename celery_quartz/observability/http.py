"""Health over HTTP for the beat process: ``/healthz`` and ``/livez``.

Built on the standard library's :class:`http.server.ThreadingHTTPServer`, served from a daemon
thread: no dependency to keep up to date, nothing to configure, and two read-only GET routes need
nothing more. Off by default; on with ``quartz_health_port``.

* ``GET /healthz``: :func:`celery_quartz.health.health_check` as JSON; HTTP 200 when healthy or
  degraded (a standby or not-yet-elected replica stays in rotation), 503 when unhealthy.
* ``GET /livez``: 200 while the process answers at all (process liveness only).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from celery_quartz.health import HealthReport, HealthStatus

logger = logging.getLogger(__name__)


class HealthServer:
    """Serves ``report()`` (a :class:`HealthReport`) on ``address:port`` until :meth:`stop`."""

    def __init__(self, report: Callable[[], HealthReport], address: str, port: int) -> None:
        self.report = report
        handler = _handler(report)
        self.server = ThreadingHTTPServer((address, port), handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="celery-quartz-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the one chosen for port 0)."""
        return int(self.server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        logger.info(
            "health endpoint on http://%s:%d/healthz", self.server.server_address[0], self.port
        )
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


def _handler(report: Callable[[], HealthReport]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/livez":
                self._send(200, {"status": "alive"})
            elif path == "/healthz":
                try:
                    result = report()
                except Exception as exc:  # the check itself failed: unhealthy, say why
                    self._send(503, {"status": "unhealthy", "description": repr(exc)})
                    return
                code = 503 if result.status is HealthStatus.UNHEALTHY else 200
                self._send(
                    code,
                    {
                        "status": result.status.value,
                        "description": result.description,
                        "data": result.data,
                    },
                )
            else:
                self._send(404, {"error": "not found; try /healthz or /livez"})

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("health endpoint: " + format, *args)

    return Handler
