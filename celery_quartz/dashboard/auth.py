"""Who may do what: the authorization policy, called on every request with (principal,
scheduler name, action), and the default one, bearer tokens from the settings.

An action is ``"read"`` or the name of a write (:data:`WRITE_ACTIONS`). ``quartz_dashboard_
read_only`` refuses every write before the policy is asked. A policy is configured as a dotted
path (``quartz_dashboard_authorization = "proj.auth:policy"``) naming either

* a callable ``(principal, scheduler_name, action) -> bool``; principals still come from the
  bearer tokens of ``quartz_dashboard_tokens`` (None when the request carries none), or
* an :class:`AuthorizationPolicy` subclass (or instance), which also authenticates: its
  :meth:`~AuthorizationPolicy.authenticate` reads the request's headers (a proxy's
  ``X-Forwarded-User``, say).
"""

from __future__ import annotations

import hmac
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from celery_quartz.config import Settings
from celery_quartz.errors import ConfigurationError

READ = "read"
#: Every named write, as the policy is asked about it.
WRITE_ACTIONS = frozenset(
    {
        "pause_trigger",
        "resume_trigger",
        "pause_job",
        "resume_job",
        "pause_group",
        "resume_group",
        "trigger_job",
        "reset_trigger",
        "unschedule",
        "delete_job",
        "repin_trigger",
        "schedule_job",
        "edit_trigger",
        "backfill",
        "pause_all",
        "resume_all",
    }
)


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a name, the scheduler names its token reaches (None: every
    one), and whether its token may write at all."""

    name: str
    schedulers: frozenset[str] | None = None
    write: bool = True


class AuthorizationPolicy:
    """Subclass to authenticate and authorize otherwise than by bearer tokens."""

    def authenticate(self, headers: Mapping[str, str], token: str | None) -> Principal | None:
        """The principal of a request (``token``: its bearer token, or the one its session
        cookie holds), or None for an anonymous one."""
        return None

    def authorize(self, principal: Principal | None, scheduler: str, action: str) -> bool:
        """Whether ``principal`` may do ``action`` on scheduler ``scheduler``."""
        return False


class TokenPolicy(AuthorizationPolicy):
    """The default: ``quartz_dashboard_tokens`` maps each bearer token to a principal name, or
    to ``{"principal": name, "schedulers": [...], "write": bool}``. A known token reads and
    writes the schedulers it names (every one when it names none); a request without one reads
    only with ``quartz_dashboard_anonymous_read``; everything else is refused, and with no
    token configured everything is."""

    def __init__(self, tokens: Mapping[str, Any] | None, *, anonymous_read: bool) -> None:
        self.tokens = {token: _principal(token, value) for token, value in (tokens or {}).items()}
        self.anonymous_read = anonymous_read

    def authenticate(self, headers: Mapping[str, str], token: str | None) -> Principal | None:
        if not token:
            return None
        # Compare every configured token in constant time (no early exit on a match).
        found = None
        for known, principal in self.tokens.items():
            if hmac.compare_digest(known.encode(), token.encode()):
                found = principal
        return found

    def authorize(self, principal: Principal | None, scheduler: str, action: str) -> bool:
        if principal is None:
            return self.anonymous_read and action == READ
        if principal.schedulers is not None and scheduler not in principal.schedulers:
            return False
        return action == READ or principal.write


class _CallablePolicy(TokenPolicy):
    """A plain ``(principal, scheduler, action) -> bool`` callable over the token principals."""

    def __init__(self, decide: Callable[[str | None, str, str], bool], tokens: Any) -> None:
        super().__init__(tokens, anonymous_read=False)
        self.decide = decide

    def authorize(self, principal: Principal | None, scheduler: str, action: str) -> bool:
        return bool(self.decide(None if principal is None else principal.name, scheduler, action))


def load_policy(settings: Settings) -> AuthorizationPolicy:
    """The policy the settings name (``quartz_dashboard_authorization``), or the token one."""
    path = settings.dashboard_authorization
    if not path:
        return TokenPolicy(
            settings.dashboard_tokens, anonymous_read=settings.dashboard_anonymous_read
        )
    module_name, _, attribute = path.replace(":", ".").rpartition(".")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"quartz_dashboard_authorization {path!r}: {exc}") from None
    if isinstance(target, type) and issubclass(target, AuthorizationPolicy):
        return target()
    if isinstance(target, AuthorizationPolicy):
        return target
    if callable(target):
        return _CallablePolicy(target, settings.dashboard_tokens)
    raise ConfigurationError(
        f"quartz_dashboard_authorization {path!r}: not a callable or an AuthorizationPolicy"
    )


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer …`` header."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _principal(token: str, value: Any) -> Principal:
    if not isinstance(token, str) or not token:
        raise ConfigurationError("quartz_dashboard_tokens: each token must be a non-empty string")
    if isinstance(value, str):
        return Principal(value)
    if isinstance(value, Mapping) and isinstance(value.get("principal"), str):
        schedulers = value.get("schedulers")
        if schedulers is not None and (
            isinstance(schedulers, str) or not all(isinstance(s, str) for s in schedulers)
        ):
            raise ConfigurationError(
                f"quartz_dashboard_tokens: principal {value['principal']!r}: schedulers must "
                "be a list of scheduler names"
            )
        return Principal(
            value["principal"],
            None if schedulers is None else frozenset(schedulers),
            bool(value.get("write", True)),
        )
    raise ConfigurationError(
        "quartz_dashboard_tokens: each token maps to a principal name or to "
        '{"principal": name, "schedulers": [...], "write": bool}'
    )
