"""The dashboard's authorization policy, its settings and redaction, without a database."""

from __future__ import annotations

from dataclasses import replace

import pytest

from celery_quartz.config import Settings
from celery_quartz.dashboard.auth import (
    AuthorizationPolicy,
    Principal,
    TokenPolicy,
    bearer_token,
    load_policy,
)
from celery_quartz.errors import ConfigurationError
from celery_quartz.presentation import Redactor

TOKENS = {
    "a": "admin",
    "r": {"principal": "reader", "write": False},
    "t": {"principal": "tenant", "schedulers": ["billing"]},
}


def _who(policy: TokenPolicy, token: str | None) -> Principal | None:
    return policy.authenticate({}, token)


def test_with_no_token_configured_everything_is_refused() -> None:
    policy = TokenPolicy(None, anonymous_read=False)
    assert _who(policy, "a") is None
    assert not policy.authorize(None, "s", "read")


def test_anonymous_read_reads_and_never_writes() -> None:
    policy = TokenPolicy(TOKENS, anonymous_read=True)
    assert policy.authorize(None, "s", "read")
    assert not policy.authorize(None, "s", "pause_trigger")


def test_a_token_maps_to_its_principal_and_its_rights() -> None:
    policy = TokenPolicy(TOKENS, anonymous_read=False)
    admin, reader, tenant = (_who(policy, t) for t in ("a", "r", "t"))
    assert admin is not None and policy.authorize(admin, "any", "delete_job")
    assert reader is not None and policy.authorize(reader, "any", "read")
    assert not policy.authorize(reader, "any", "pause_trigger")
    assert tenant is not None and policy.authorize(tenant, "billing", "pause_trigger")
    assert not policy.authorize(tenant, "other", "read")
    assert _who(policy, "wrong") is None and _who(policy, "") is None


def test_the_bearer_token_is_read_from_the_authorization_header() -> None:
    assert bearer_token({"authorization": "Bearer abc"}) == "abc"
    assert bearer_token({"authorization": "Basic abc"}) is None
    assert bearer_token({}) is None


def decide(principal: str | None, scheduler: str, action: str) -> bool:
    return principal == "admin" and action == "read"


class HeaderPolicy(AuthorizationPolicy):
    def authenticate(self, headers: dict[str, str], token: str | None) -> Principal | None:
        user = headers.get("x-forwarded-user")
        return None if user is None else Principal(user)

    def authorize(self, principal: Principal | None, scheduler: str, action: str) -> bool:
        return principal is not None


def test_a_dotted_path_names_a_function_or_a_policy_class() -> None:
    settings = replace(Settings(), dashboard_tokens=TOKENS)
    function = load_policy(replace(settings, dashboard_authorization=f"{__name__}:decide"))
    admin = function.authenticate({}, "a")
    assert function.authorize(admin, "s", "read")
    assert not function.authorize(admin, "s", "pause_trigger")
    custom = load_policy(replace(settings, dashboard_authorization=f"{__name__}.HeaderPolicy"))
    assert custom.authenticate({"x-forwarded-user": "eve"}, None) == Principal("eve")


def test_a_dotted_path_that_names_nothing_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="quartz_dashboard_authorization"):
        load_policy(replace(Settings(), dashboard_authorization="no.such.module:thing"))


def test_a_badly_shaped_token_entry_is_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="quartz_dashboard_tokens"):
        TokenPolicy({"x": {"name": "no principal key"}}, anonymous_read=False)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dashboard_url_prefix", "quartz"),
        ("dashboard_port", 70000),
        ("dashboard_tokens", ["a"]),
        ("dashboard_redact_keys", "(unclosed"),
        ("dashboard_allowed_tasks", "proj.task"),
        ("dashboard_read_only", "yes"),
        ("dashboard_poll_interval", -1),
    ],
)
def test_bad_dashboard_settings_are_refused_naming_the_key(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"quartz_{field}"):
        replace(Settings(), **{field: value}).validate()


def test_values_under_secret_looking_keys_are_redacted_at_any_depth() -> None:
    redact = Redactor(Settings().dashboard_redact_keys)
    data = {"db": {"Password": "x", "host": "h"}, "items": [{"api_key": 1}], "n": 2}
    assert redact(data) == {
        "db": {"Password": "***", "host": "h"},
        "items": [{"api_key": "***"}],
        "n": 2,
    }
