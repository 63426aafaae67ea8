"""What every request of the dashboard needs (the targets, the policy, the settings), and the
API's error answer."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from typing import Any

from celery import Celery
from starlette.requests import Request
from starlette.responses import JSONResponse

from celery_quartz.audit import acting_as
from celery_quartz.clock import Clock
from celery_quartz.config import Settings
from celery_quartz.dashboard.actions import HttpError
from celery_quartz.dashboard.auth import READ, Principal, bearer_token, load_policy
from celery_quartz.dashboard.targets import Target, Targets
from celery_quartz.presentation import Redactor
from celery_quartz.publisher import Publisher

#: The session cookie of the pages: a random id the CSRF token is bound to, and the token the
#: user logged in with (HttpOnly, SameSite=Strict; Secure behind HTTPS).
logger = logging.getLogger(__name__)

SESSION_COOKIE = "cq_session"
TOKEN_COOKIE = "cq_token"
#: The audit's principal of a write no token names (a policy that lets anyone write).
ANONYMOUS = "anonymous"


class Dashboard:
    """What every request needs: the targets, the policy, the settings."""

    def __init__(self, app: Celery, settings: Settings, clock: Clock | None = None) -> None:
        self.app = app
        self.settings = settings
        self.targets = Targets(app, settings, clock)
        self.policy = load_policy(settings)
        self.redact = Redactor(settings.dashboard_redact_keys)
        self.secret_key = (settings.dashboard_secret_key or secrets.token_hex(32)).encode()
        self.prefix = settings.dashboard_url_prefix.rstrip("/")
        self.default_queue = app.conf.task_default_queue or "celery"
        # Where a firing without a route of its own was sent (the dashboard publishes nothing).
        self.queue_of = Publisher(app).queue_of

    def principal(self, request: Request, *, cookie: bool) -> tuple[Principal | None, bool]:
        """The request's principal, and whether it presented a token at all. The API reads
        only the bearer header (a cookie would make its POSTs forgeable); the pages read the
        bearer header or the login cookie."""
        token = bearer_token(request.headers)
        if token is None and cookie:
            token = request.cookies.get(TOKEN_COOKIE) or None
        return self.policy.authenticate(request.headers, token), token is not None

    def allowed(self, principal: Principal | None, scheduler: str, action: str) -> bool:
        """The read-only flag first (it refuses every write), then the policy."""
        if action != READ and self.settings.dashboard_read_only:
            return False
        return self.policy.authorize(principal, scheduler, action)

    def require(self, request: Request, scheduler: str, action: str, *, cookie: bool) -> Target:
        """The target ``scheduler`` if the request may do ``action`` on it; raises the
        :class:`HttpError` to answer otherwise (the policy is asked before the name is looked
        up, so a refused caller learns nothing of which schedulers exist)."""
        principal, presented = self.principal(request, cookie=cookie)
        if presented and principal is None:
            raise HttpError(401, "invalid_token", "the token is not valid")
        if action != READ and self.settings.dashboard_read_only:
            raise HttpError(403, "read_only", "the dashboard is read-only: no write is accepted")
        if not self.policy.authorize(principal, scheduler, action):
            if principal is None:
                raise HttpError(401, "unauthenticated", "a bearer token is required")
            raise HttpError(
                403, "forbidden", f"{principal.name} may not {action} on scheduler {scheduler!r}"
            )
        target = self.targets.get(scheduler)
        if target is None:
            raise HttpError(404, "not_found", f"no scheduler named {scheduler!r} in the store")
        return target

    def acting(
        self, request: Request, via: str, work: Callable[..., Any], *, cookie: bool
    ) -> Callable[..., Any]:
        """``work``, its writes audited as the request's principal through ``via`` (``api``,
        ``dashboard``), in whichever thread it runs."""

        def run(*args: Any) -> Any:
            principal, _ = self.principal(request, cookie=cookie)
            name = principal.name if principal is not None else ""
            with acting_as(name if name.strip() else ANONYMOUS, via):
                return work(*args)

        return run

    def readable(self, request: Request, *, cookie: bool) -> list[str]:
        """The scheduler names the request may read."""
        principal, _ = self.principal(request, cookie=cookie)
        return [n for n in self.targets.names() if self.policy.authorize(principal, n, READ)]

    def clusters(self, names: list[str]) -> list[dict[str, Any]]:
        """One row per scheduler (a cluster) of ``names``: its address, store, name and nodes
        (each with its kind and liveness); a scheduler whose store does not answer has an
        ``error`` instead of nodes."""
        rows = []
        for name in names:
            row: dict[str, Any] = {"name": name, "store": None, "scheduler": name}
            try:
                target = self.targets.get(name)
                if target is None:
                    continue
                row.update(store=target.store_name, scheduler=target.scheduler_name)
                row["nodes"] = [
                    {"instance_name": n.instance_name, "kind": n.kind, "alive": n.alive}
                    for n in target.store.list_nodes()
                ]
            except Exception as exc:  # one store down: the others are still shown
                logger.warning("dashboard: reading the nodes of %s failed: %s", name, exc)
                row["nodes"] = None
                row["error"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            rows.append(row)
        return rows


def error_response(error: HttpError) -> JSONResponse:
    headers: Mapping[str, str] | None = None
    if error.status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="celery-quartz"'}
    return JSONResponse(error.to_json(), status_code=error.status, headers=headers)
