"""``GET /metrics``: the store's gauges in Prometheus's text format, read by the dashboard
process itself (:mod:`celery_quartz.observability.exposition`), for every scheduler the caller
may read. A scrape presents a bearer token (Prometheus's ``authorization``), or none with
``quartz_dashboard_anonymous_read``."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from celery_quartz.dashboard.app import Dashboard
from celery_quartz.observability.exposition import families, prometheus_text, read_store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def collect(d: Dashboard, names: list[str]) -> str:
    """The text of one scrape over the schedulers ``names``."""
    found = families()
    deadlines = d.settings.success_deadlines
    for name in names:
        target = d.targets.get(name)
        if target is not None:
            read_store(found, name, target.store, deadlines, d.targets.clock.now())
    return prometheus_text(found.values())


def routes(d: Dashboard) -> list[BaseRoute]:
    async def metrics(request: Request) -> Response:
        # Answered here, not by the pages' error handler: a scraper is not sent to the login.
        principal, presented = await run_in_threadpool(d.principal, request, cookie=False)
        names = await run_in_threadpool(d.readable, request, cookie=False)
        if (presented and principal is None) or (not names and principal is None):
            return PlainTextResponse(
                "a valid bearer token is required\n",
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="celery-quartz"'},
            )
        text = await run_in_threadpool(collect, d, names)
        return PlainTextResponse(text, media_type=CONTENT_TYPE)

    return [Route("/metrics", metrics)]
