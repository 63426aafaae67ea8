"""One module resolves zone names and finds daylight-saving changes for the whole package."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest

from celery_quartz.errors import UnknownTimeZoneError, ValidationError
from celery_quartz.tz import (
    first_instant_at_or_after,
    gap_end,
    is_in_gap,
    resolve_time_zone,
    time_zone_name,
)

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def test_an_iana_name_resolves_with_zoneinfo() -> None:
    assert resolve_time_zone("Europe/Helsinki") == ZoneInfo("Europe/Helsinki")


def test_a_windows_id_resolves_case_insensitively() -> None:
    assert resolve_time_zone("fle standard time") == ZoneInfo("Europe/Kyiv")


def test_utc_names_resolve_to_utc() -> None:
    assert resolve_time_zone("Etc/UTC") is UTC
    assert time_zone_name(UTC) == "UTC"


def test_the_windows_display_name_of_utc_resolves_to_utc() -> None:
    # Quartz.NET's TimeZoneUtil aliases "Coordinated Universal Time" to "UTC".
    assert resolve_time_zone("Coordinated Universal Time") is UTC
    assert resolve_time_zone("coordinated universal time") is UTC


def test_a_cron_trigger_in_coordinated_universal_time_fires_in_utc() -> None:
    from celery_quartz.triggers import CronTrigger

    trigger = CronTrigger(expression="0 0 9 * * ?", time_zone="Coordinated Universal Time")
    assert trigger.next_fire_time_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 1, 1, 9, tzinfo=UTC
    )


def test_an_unknown_zone_is_our_error_naming_it() -> None:
    with pytest.raises(UnknownTimeZoneError, match="Mars/Olympus_Mons"):
        resolve_time_zone("Mars/Olympus_Mons")


def test_an_unknown_zone_error_is_a_validation_error_and_a_value_error() -> None:
    assert issubclass(UnknownTimeZoneError, ValidationError)
    assert issubclass(UnknownTimeZoneError, ValueError)


def test_a_path_like_name_is_refused_as_unknown() -> None:
    with pytest.raises(UnknownTimeZoneError):
        resolve_time_zone("../../etc/passwd")


def test_a_wall_time_in_the_spring_forward_gap_is_in_the_gap() -> None:
    assert is_in_gap(datetime(2026, 3, 29, 2, 30), BERLIN)
    assert not is_in_gap(datetime(2026, 3, 29, 3, 30), BERLIN)
    assert not is_in_gap(datetime(2026, 10, 25, 2, 30), BERLIN)  # repeated, not skipped


def test_the_gap_ends_when_the_clocks_move() -> None:
    assert gap_end(datetime(2026, 3, 29, 2, 30), BERLIN) == datetime(2026, 3, 29, 1, tzinfo=UTC)


def test_the_gap_end_is_exact_in_a_half_hour_zone() -> None:
    lord_howe = ZoneInfo("Australia/Lord_Howe")
    assert gap_end(datetime(2026, 10, 4, 2, 15), lord_howe) == datetime(
        2026, 10, 3, 15, 30, tzinfo=UTC
    )


def test_first_instant_at_or_after_reads_a_repeated_time_at_its_first_pass() -> None:
    assert first_instant_at_or_after(datetime(2026, 10, 25, 2, 30), BERLIN) == datetime(
        2026, 10, 25, 0, 30, tzinfo=UTC
    )


def test_first_instant_at_or_after_a_skipped_time_is_the_gap_end() -> None:
    assert first_instant_at_or_after(datetime(2026, 3, 29, 2, 0), BERLIN) == datetime(
        2026, 3, 29, 1, tzinfo=UTC
    )
