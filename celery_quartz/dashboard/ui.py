"""The HTML pages: server-rendered (Jinja2), small inline CSS and JavaScript, no asset from
anywhere else. Every form POST carries a CSRF token bound to the session cookie; read-only mode
shows no action and refuses every POST."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import re
import secrets
from typing import Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from celery_quartz.dashboard import api, history_pages
from celery_quartz.dashboard.actions import (
    ALL_ACTIONS,
    GROUP_ACTIONS,
    JOB_ACTIONS,
    TRIGGER_ACTIONS,
    HttpError,
    check_text,
    from_quartz_error,
)
from celery_quartz.dashboard.app import SESSION_COOKIE, TOKEN_COOKIE, Dashboard, error_response
from celery_quartz.dashboard.auth import READ
from celery_quartz.errors import QuartzError

#: Characters that reorder the text around them (bidirectional overrides, embeddings,
#: isolates and marks): a name holding one would display other than it is.
_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(value: Any) -> Any:
    """Every value a page shows, with each bidirectional control character written out as
    ``[U+202E]`` (what it is) instead of acting on the text around it."""
    if not isinstance(value, str) or not _BIDI_CONTROLS.search(value):
        return value

    def visible(match: re.Match[str]) -> str:
        return f"[U+{ord(match.group()):04X}]"

    shown = _BIDI_CONTROLS.sub(visible, value)
    return Markup(shown) if isinstance(value, Markup) else shown  # no markup is added


def _json(value: Any, indent: int | None = None) -> str:
    """JSON as a person reads it (the page escapes it as HTML, as any text)."""
    return json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=True)


_env = Environment(
    loader=PackageLoader("celery_quartz.dashboard", "templates"),
    autoescape=select_autoescape(["html"]),
    finalize=_shown,
)
_env.filters["json"] = _json


def _when(value: str | None) -> str:
    """An ISO time as the pages show it: to the second, in UTC."""
    if not value:
        return "\u2013"  # an en dash
    from datetime import datetime, timezone

    moment = datetime.fromisoformat(value).astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


_env.filters["when"] = _when
#: The trigger actions a trigger's page offers as buttons (the API has them all).
PAGE_TRIGGER_ACTIONS = ("pause", "resume", "reset", "unschedule")


def csrf_token(d: Dashboard, session: str) -> str:
    return hmac.new(d.secret_key, session.encode(), hashlib.sha256).hexdigest()


def _session(request: Request) -> tuple[str, bool]:
    """The session id of the request's cookie, or a new one (True: to be set)."""
    session = request.cookies.get(SESSION_COOKIE)
    if session and len(session) == 43:
        return session, False
    return _new_session(), True


def _new_session() -> str:
    return secrets.token_urlsafe(32)


def _set_session(d: Dashboard, request: Request, response: Response, session: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        session,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
        path=d.prefix or "/",
    )


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def content_security_policy(nonce: str) -> str:
    """What a page may load: nothing from elsewhere, and no script but its own (the one with
    this response's nonce; no inline event handler, no ``javascript:`` URL)."""
    return (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    )


def render(
    d: Dashboard, request: Request, template: str, status: int = 200, **context: Any
) -> HTMLResponse:
    session, new = _session(request)
    principal, _ = d.principal(request, cookie=True)
    nonce = secrets.token_urlsafe(18)
    html = _env.get_template(template).render(
        prefix=d.prefix,
        nonce=nonce,
        csrf=csrf_token(d, session),
        principal=principal,
        read_only=d.settings.dashboard_read_only,
        poll=d.settings.dashboard_poll_interval,
        quote=_quote,
        query=_query,
        **context,
    )
    response = HTMLResponse(html, status_code=status)
    if new:
        _set_session(d, request, response, session)
    # The other headers (no framing, nosniff) are every answer's: server.SECURITY_HEADERS.
    response.headers["Content-Security-Policy"] = content_security_policy(nonce)
    return response


#: The edit form's fields that are numbers, and how each is read.
_EDIT_NUMBERS: dict[str, Any] = {"priority": int, "interval": float}
_EDIT_TEXTS = (
    "cron",
    "time_zone",
    "rrule",
    "misfire_instruction",
    "overlap_policy",
    "preferred_node",
    "execution_group",
    "calendar",
    "description",
)
#: The edit form's details that a "clear" box (``clear_<detail>``) removes: the edit sets
#: them to none.
_EDIT_CLEARABLE = ("preferred_node", "execution_group", "calendar", "description")


def _backfill_form(form: Any) -> dict[str, Any]:
    """The backfill dialog's fields as a backfill's body (its times are UTC)."""
    body: dict[str, Any] = {"from": form.get("from") or "", "to": form.get("to") or ""}
    for name, kind in (("max_slots", int), ("spacing", float)):
        value = str(form.get(name) or "").strip()
        if value:
            try:
                body[name] = kind(value)
            except ValueError:
                raise HttpError(422, "invalid", f"{name}: not a number: {value!r}", name) from None
    for flag in ("include_succeeded", "dry_run"):
        if form.get(flag):
            body[flag] = True
    return body


def _edit_form(form: Any) -> dict[str, Any]:
    """The edit form's filled fields as an edit's body: an empty field is left as it is, and
    a ticked ``clear_<detail>`` box sets that detail to none (with a value too, it is refused:
    which one was meant?)."""
    body: dict[str, Any] = {}
    for name in (*_EDIT_TEXTS, *_EDIT_NUMBERS):
        value = str(form.get(name) or "").strip()
        if name in _EDIT_CLEARABLE and form.get(f"clear_{name}"):
            if value:
                raise HttpError(
                    422, "invalid", f"{name}: give a new value or clear it, not both", name
                )
            body[name] = None
            continue
        if not value:
            continue
        if name in _EDIT_NUMBERS:
            try:
                body[name] = _EDIT_NUMBERS[name](value)
            except ValueError:
                raise HttpError(422, "invalid", f"{name}: not a number: {value!r}", name) from None
        else:
            body[name] = value
    if not body:
        raise HttpError(
            422, "invalid", "nothing to change: fill in a field, or tick a clear box", "body"
        )
    return body


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _query(params: dict[str, str], **changes: str | None) -> str:
    """``?…`` of ``params`` with ``changes`` (None removes a parameter)."""
    merged: dict[str, str | None] = {**params, **changes}
    return "?" + urlencode({k: v for k, v in merged.items() if v})


def error_page(d: Dashboard, request: Request, error: HttpError) -> Response:
    if error.status == 401:
        return RedirectResponse(f"{d.prefix}/login?{urlencode({'next': request.url.path})}", 303)
    return render(d, request, "error.html", status=error.status, error=error)


def check_origin(request: Request) -> None:
    """Refuse a form posted from another site: a browser says where a POST comes from in
    ``Origin`` (or, failing that, ``Referer``); it must be this dashboard's own origin, as the
    request reached it (scheme, host and port). A request with neither is no browser's
    cross-site post, and its CSRF token decides."""
    origin = request.headers.get("origin")
    if origin is None:
        referer = urlsplit(request.headers.get("referer", ""))
        if not referer.scheme:
            return
        origin = f"{referer.scheme}://{referer.netloc}"
    own = f"{request.url.scheme}://{request.url.netloc}"
    if origin != own:
        raise HttpError(
            403, "csrf", f"the form was posted from {origin!r}, not from this dashboard ({own})"
        )


async def check_csrf(d: Dashboard, request: Request) -> dict[str, Any]:
    """The form's fields, once it comes from this dashboard's own pages (its origin, and its
    CSRF token matching the session cookie's); 403 otherwise."""
    check_origin(request)
    form = await request.form()
    session = request.cookies.get(SESSION_COOKIE)
    sent = form.get("csrf_token")
    if (
        not session
        or not isinstance(sent, str)
        or not hmac.compare_digest(sent, csrf_token(d, session))
    ):
        raise HttpError(403, "csrf", "the form's CSRF token is missing or does not match")
    return {k: v for k, v in form.items() if isinstance(v, str)}


def routes(d: Dashboard) -> list[BaseRoute]:
    async def page(
        request: Request, template: str, work: Any, *args: Any, **extra: Any
    ) -> Response:
        scheduler = request.path_params["scheduler"]
        target = await run_in_threadpool(d.require, request, scheduler, READ, cookie=True)
        params = api.request_text(request)
        data = await run_in_threadpool(functools.partial(work, d, target, *args, params))
        principal, _ = d.principal(request, cookie=True)
        may_write = not d.settings.dashboard_read_only and any(
            d.allowed(principal, scheduler, a) for a in ("pause_trigger", "resume_trigger")
        )
        return render(
            d,
            request,
            template,
            scheduler=scheduler,
            schedulers=d.readable(request, cookie=True),
            data=data,
            params=params,
            may_write=may_write,
            done=request.query_params.get("done"),
            **extra,
        )

    async def home(request: Request) -> Response:
        names = await run_in_threadpool(d.readable, request, cookie=True)
        principal, _ = d.principal(request, cookie=True)
        if not names and principal is None:
            return RedirectResponse(f"{d.prefix}/login", 303)
        if len(names) == 1 and not d.targets.several:
            return RedirectResponse(f"{d.prefix}/s/{_quote(names[0])}/", 303)
        clusters = await run_in_threadpool(d.clusters, names)
        return render(
            d,
            request,
            "home.html",
            clusters=clusters,
            several=d.targets.several,
            unreachable=d.targets.unreachable(),
            scheduler=None,
        )

    async def overview(request: Request) -> Response:
        return await page(request, "overview.html", api.read_overview)

    async def triggers(request: Request) -> Response:
        return await page(
            request, "triggers.html", api.read_triggers, states=sorted(api.TRIGGER_STATES)
        )

    async def trigger(request: Request) -> Response:
        group, name = request.path_params["group"], request.path_params["name"]
        return await page(
            request,
            "trigger.html",
            history_pages.read_trigger_page,
            group,
            name,
            actions=PAGE_TRIGGER_ACTIONS,
        )

    async def job(request: Request) -> Response:
        group, name = request.path_params["group"], request.path_params["name"]
        return await page(request, "job.html", history_pages.read_job_page, group, name)

    async def history(request: Request) -> Response:
        return await page(request, "history.html", history_pages.read_history)

    async def audit(request: Request) -> Response:
        return await page(request, "audit.html", history_pages.read_audit)

    async def firings(request: Request) -> Response:
        return await page(request, "firings.html", api.read_firings)

    async def calendars(request: Request) -> Response:
        return await page(request, "calendars.html", api.read_calendars)

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return render(
                d, request, "login.html", scheduler=None, next=request.query_params.get("next", "")
            )
        form = await check_csrf(d, request)
        token = form.get("token", "")
        principal = d.policy.authenticate(request.headers, token)
        if principal is None:
            return render(
                d,
                request,
                "login.html",
                status=401,
                scheduler=None,
                next=form.get("next", ""),
                failed=True,
            )
        target = form.get("next", "")
        # Only a path of this dashboard: never another site ("//host", "/\\host").
        if not target.startswith(f"{d.prefix}/") or target[1:2] in ("/", "\\"):
            target = f"{d.prefix}/"
        response = RedirectResponse(target, 303)
        # A new session at login: a session id chosen before it (by whoever set the cookie)
        # does not carry over to the logged-in session (session fixation).
        _set_session(d, request, response, _new_session())
        response.set_cookie(
            TOKEN_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=_secure(request),
            path=d.prefix or "/",
        )
        return response

    async def logout(request: Request) -> Response:
        await check_csrf(d, request)
        response = RedirectResponse(f"{d.prefix}/login", 303)
        response.delete_cookie(TOKEN_COOKIE, path=d.prefix or "/")
        _set_session(d, request, response, _new_session())
        return response

    async def act(request: Request) -> Response:
        """A form's action on a trigger, a job, a group or everything (no key in its path);
        back to where it came from."""
        p = request.path_params
        kind, verb, scheduler = p.get("kind", "all"), p["verb"], p["scheduler"]
        # Each kind's table, and the parts of a key its path holds.
        tables: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
            "triggers": (TRIGGER_ACTIONS, ("group", "name")),
            "jobs": (JOB_ACTIONS, ("group", "name")),
            "groups": (GROUP_ACTIONS, ("group",)),
            "all": ({v: (a, api.on_everything(w)) for v, (a, w) in ALL_ACTIONS.items()}, ()),
        }
        table, parts = tables.get(kind, ({}, ()))
        if verb not in table or set(parts) != set(p) - {"scheduler", "kind", "verb"}:
            raise HttpError(404, "not_found", f"no action {verb!r} on {kind}")
        form = await check_csrf(d, request)
        check_text(p)
        action, work = table[verb]
        target = await run_in_threadpool(d.require, request, scheduler, action, cookie=True)
        key = [p[part] for part in parts]
        body: dict[str, Any] = {}
        if verb == "run-again":
            body = {k: form.get(k, "") for k in ("history_id", "event_time")}
        elif verb in ("pause", "pause-all") and form.get("reason"):
            body = {"reason": form.get("reason")}
        elif verb == "edit":
            body = _edit_form(form)
        elif verb == "backfill":
            body = _backfill_form(form)
        audited = d.acting(request, "dashboard", work, cookie=True)
        if verb == "backfill" and body.get("dry_run"):
            # The dialog's count as its range changes, read by its script: JSON, refusals too.
            try:
                counted = await run_in_threadpool(audited, target.client, *key, body)
            except QuartzError as error:
                return error_response(from_quartz_error(error))
            except HttpError as error:
                return error_response(error)
            return JSONResponse(counted)
        try:
            result = await run_in_threadpool(audited, target.client, *key, body)
        except QuartzError as error:
            raise from_quartz_error(error) from None
        done = verb if kind == "all" else f"{kind} {verb}"
        if isinstance(result, dict) and isinstance(result.get("message"), str):
            done = result["message"]
        elif verb == "backfill":
            done = (
                f"backfill: {result['scheduled']} of {result['slots_found']} slot(s) scheduled, "
                f"{result['already_scheduled']} already scheduled, "
                f"{result['already_succeeded']} already succeeded"
            )
        back = form.get("back", "")
        if not back.startswith(f"{d.prefix}/s/"):
            back = f"{d.prefix}/s/{_quote(scheduler)}/"
        sep = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{sep}{urlencode({'done': done})}", 303)

    s = "/s/{scheduler}"
    return [
        Route("/", home),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route(f"{s}/", overview),
        Route(f"{s}/triggers", triggers),
        Route(f"{s}/triggers/{{group}}/{{name}}", trigger),
        Route(f"{s}/jobs/{{group}}/{{name}}", job),
        Route(f"{s}/history", history),
        Route(f"{s}/audit", audit),
        Route(f"{s}/firings", firings),
        Route(f"{s}/calendars", calendars),
        Route(f"{s}/{{kind}}/{{group}}/{{name}}/{{verb}}", act, methods=["POST"]),
        Route(f"{s}/{{kind}}/{{group}}/{{verb}}", act, methods=["POST"]),
        Route(f"{s}/{{verb}}", act, methods=["POST"]),
    ]
