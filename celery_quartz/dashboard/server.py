"""The dashboard's ASGI application: the JSON API under ``/api/v1`` and the HTML pages, served
under ``quartz_dashboard_url_prefix``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from celery import Celery
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount

from celery_quartz.clock import Clock
from celery_quartz.config import Settings
from celery_quartz.dashboard import api, ui
from celery_quartz.dashboard.actions import HttpError
from celery_quartz.dashboard.app import Dashboard, error_response


def create_app(
    app: Celery, *, settings: Settings | None = None, clock: Clock | None = None
) -> Starlette:
    """The dashboard and HTTP API of ``app``'s store (its ``quartz_*`` settings), served
    under ``quartz_dashboard_url_prefix``. Attaches to the store; starts no scheduler."""
    settings = settings or Settings.from_app(app)
    dashboard = Dashboard(app, settings, clock)
    routes: list[BaseRoute] = [*api.routes(dashboard), *ui.routes(dashboard)]
    if dashboard.prefix:
        routes = [Mount(dashboard.prefix, routes=routes)]

    async def on_http_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, HttpError):  # Starlette's own: no route, method not allowed
            status = getattr(exc, "status_code", 500)
            codes = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}
            exc = HttpError(status, codes.get(status, "error"), str(getattr(exc, "detail", exc)))
        if request.url.path.startswith(f"{dashboard.prefix}/api/"):
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
        # Bodies are small JSON documents and forms; a bound keeps a caller from holding memory.
        max_body_size=1024 * 1024,
    )
    starlette.state.dashboard = dashboard
    return starlette
