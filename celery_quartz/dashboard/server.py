"""The dashboard's ASGI application: the JSON API under ``/api/v1`` and the HTML pages, served
under ``quartz_dashboard_url_prefix``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from celery import Celery
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from celery_quartz.clock import Clock
from celery_quartz.config import Settings
from celery_quartz.dashboard import api, metrics, ui
from celery_quartz.dashboard.actions import HttpError
from celery_quartz.dashboard.app import Dashboard, error_response

#: The largest request body: bodies are small JSON documents and forms; a bound keeps a caller
#: from holding memory.
MAX_BODY_BYTES = 1024 * 1024
#: Headers on every answer, pages and API alike; a page sets its own Content-Security-Policy
#: (with the nonce of its script), which this one does not replace.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
}


def create_app(
    app: Celery, *, settings: Settings | None = None, clock: Clock | None = None
) -> Starlette:
    """The dashboard and HTTP API of ``app``'s store (its ``quartz_*`` settings), served
    under ``quartz_dashboard_url_prefix``. Attaches to the store; starts no scheduler."""
    settings = settings or Settings.from_app(app)
    dashboard = Dashboard(app, settings, clock)
    routes: list[BaseRoute] = [
        *api.routes(dashboard),
        *metrics.routes(dashboard),
        *ui.routes(dashboard),
    ]
    if dashboard.prefix:
        routes = [Mount(dashboard.prefix, routes=routes)]

    async def on_http_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HttpError):  # Starlette's own: no route, method not allowed
            status = getattr(exc, "status_code", 500)
            codes = {404: "not_found", 405: "method_not_allowed"}
            exc = HttpError(status, codes.get(status, "error"), str(getattr(exc, "detail", exc)))
        path = request.url.path
        # Outside the prefix (a browser's own /favicon.ico) is not the dashboard's: no page,
        # and above all no session cookie, which would replace the login form's under the
        # prefix.
        outside = dashboard.prefix and not path.startswith(f"{dashboard.prefix}/")
        if outside or path.startswith(f"{dashboard.prefix}/api/"):
            return error_response(exc)
        return ui.error_page(dashboard, request, exc)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        dashboard.targets.close()

    starlette = Starlette(
        routes=routes,
        exception_handlers={HttpError: on_http_error, HTTPException: on_http_error},
        lifespan=lifespan,
        middleware=[Middleware(SecurityHeaders), Middleware(BodyLimit, MAX_BODY_BYTES)],
    )
    starlette.state.dashboard = dashboard
    return starlette


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every answer that does not set its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class BodyLimit:
    """Refuses a request body over ``limit`` bytes with an :class:`HttpError` (413), raised
    where the endpoint reads the body, so that it is answered as every other refusal is (JSON
    under the API)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_large = HttpError(413, "too_large", f"the body is over {self.limit} bytes")
        declared = dict(scope["headers"]).get(b"content-length", b"")
        received = 0

        async def receive_within_limit() -> Message:
            nonlocal received
            if declared.isdigit() and int(declared) > self.limit:
                raise too_large
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise too_large
            return message

        await self.app(scope, receive_within_limit, send)
