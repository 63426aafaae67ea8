"""Time zones: names to zones, and the instants a zone's wall clock skips or repeats.

Every part of celery-quartz that reads a wall clock (cron expressions, calendars, the trigger kinds)
resolves its zone here and finds the end of a daylight-saving gap here, so that they all agree.

A zone is named by an IANA name (``"Europe/Helsinki"``, resolved with :mod:`zoneinfo`), a Windows
id (``"FLE Standard Time"``, read through :data:`WINDOWS_TIME_ZONES`), ``"UTC"`` and its aliases,
or ``"local"``, the only name that asks for the machine's own zone.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery_quartz.errors import UnknownTimeZoneError

__all__ = [
    "LOCAL_TIME_ZONE",
    "WINDOWS_TIME_ZONES",
    "first_instant_at_or_after",
    "gap_end",
    "is_in_gap",
    "offset_change",
    "resolve_time_zone",
    "time_zone_name",
]

UTC = timezone.utc
_ONE_SECOND = timedelta(seconds=1)

#: Names of UTC itself, upper case. "Coordinated Universal Time" is the Windows display name of
#: UTC, which Quartz.NET accepts as an alias of its id.
_FIXED_UTC_NAMES = frozenset(
    {
        "UTC",
        "ETC/UTC",
        "GMT",
        "ETC/GMT",
        "UCT",
        "ETC/UCT",
        "ZULU",
        "ETC/ZULU",
        "UNIVERSAL",
        "Z",
        "COORDINATED UNIVERSAL TIME",
    }
)

#: Windows time zone ids and the IANA zone each one means (the "001" territory of CLDR's table).
WINDOWS_TIME_ZONES: dict[str, str] = {
    "Dateline Standard Time": "Etc/GMT+12",
    "UTC-11": "Etc/GMT+11",
    "Aleutian Standard Time": "America/Adak",
    "Hawaiian Standard Time": "Pacific/Honolulu",
    "Marquesas Standard Time": "Pacific/Marquesas",
    "Alaskan Standard Time": "America/Anchorage",
    "UTC-09": "Etc/GMT+9",
    "Pacific Standard Time (Mexico)": "America/Tijuana",
    "UTC-08": "Etc/GMT+8",
    "Pacific Standard Time": "America/Los_Angeles",
    "US Mountain Standard Time": "America/Phoenix",
    "Mountain Standard Time (Mexico)": "America/Mazatlan",
    "Mountain Standard Time": "America/Denver",
    "Yukon Standard Time": "America/Whitehorse",
    "Central America Standard Time": "America/Guatemala",
    "Central Standard Time": "America/Chicago",
    "Easter Island Standard Time": "Pacific/Easter",
    "Central Standard Time (Mexico)": "America/Mexico_City",
    "Canada Central Standard Time": "America/Regina",
    "SA Pacific Standard Time": "America/Bogota",
    "Eastern Standard Time (Mexico)": "America/Cancun",
    "Eastern Standard Time": "America/New_York",
    "Haiti Standard Time": "America/Port-au-Prince",
    "Cuba Standard Time": "America/Havana",
    "US Eastern Standard Time": "America/Indiana/Indianapolis",
    "Turks And Caicos Standard Time": "America/Grand_Turk",
    "Paraguay Standard Time": "America/Asuncion",
    "Atlantic Standard Time": "America/Halifax",
    "Venezuela Standard Time": "America/Caracas",
    "Central Brazilian Standard Time": "America/Cuiaba",
    "SA Western Standard Time": "America/La_Paz",
    "Pacific SA Standard Time": "America/Santiago",
    "Newfoundland Standard Time": "America/St_Johns",
    "Tocantins Standard Time": "America/Araguaina",
    "E. South America Standard Time": "America/Sao_Paulo",
    "SA Eastern Standard Time": "America/Cayenne",
    "Argentina Standard Time": "America/Argentina/Buenos_Aires",
    "Greenland Standard Time": "America/Nuuk",
    "Montevideo Standard Time": "America/Montevideo",
    "Magallanes Standard Time": "America/Punta_Arenas",
    "Saint Pierre Standard Time": "America/Miquelon",
    "Bahia Standard Time": "America/Bahia",
    "UTC-02": "Etc/GMT+2",
    "Azores Standard Time": "Atlantic/Azores",
    "Cape Verde Standard Time": "Atlantic/Cape_Verde",
    "UTC": "Etc/UTC",
    "GMT Standard Time": "Europe/London",
    "Greenwich Standard Time": "Atlantic/Reykjavik",
    "Sao Tome Standard Time": "Africa/Sao_Tome",
    "Morocco Standard Time": "Africa/Casablanca",
    "W. Europe Standard Time": "Europe/Berlin",
    "Central Europe Standard Time": "Europe/Budapest",
    "Romance Standard Time": "Europe/Paris",
    "Central European Standard Time": "Europe/Warsaw",
    "W. Central Africa Standard Time": "Africa/Lagos",
    "Jordan Standard Time": "Asia/Amman",
    "GTB Standard Time": "Europe/Bucharest",
    "Middle East Standard Time": "Asia/Beirut",
    "Egypt Standard Time": "Africa/Cairo",
    "E. Europe Standard Time": "Europe/Chisinau",
    "Syria Standard Time": "Asia/Damascus",
    "West Bank Standard Time": "Asia/Hebron",
    "South Africa Standard Time": "Africa/Johannesburg",
    "FLE Standard Time": "Europe/Kyiv",
    "Israel Standard Time": "Asia/Jerusalem",
    "South Sudan Standard Time": "Africa/Juba",
    "Kaliningrad Standard Time": "Europe/Kaliningrad",
    "Sudan Standard Time": "Africa/Khartoum",
    "Libya Standard Time": "Africa/Tripoli",
    "Namibia Standard Time": "Africa/Windhoek",
    "Arabic Standard Time": "Asia/Baghdad",
    "Turkey Standard Time": "Europe/Istanbul",
    "Arab Standard Time": "Asia/Riyadh",
    "Belarus Standard Time": "Europe/Minsk",
    "Russian Standard Time": "Europe/Moscow",
    "E. Africa Standard Time": "Africa/Nairobi",
    "Volgograd Standard Time": "Europe/Volgograd",
    "Iran Standard Time": "Asia/Tehran",
    "Arabian Standard Time": "Asia/Dubai",
    "Astrakhan Standard Time": "Europe/Astrakhan",
    "Azerbaijan Standard Time": "Asia/Baku",
    "Russia Time Zone 3": "Europe/Samara",
    "Mauritius Standard Time": "Indian/Mauritius",
    "Saratov Standard Time": "Europe/Saratov",
    "Georgian Standard Time": "Asia/Tbilisi",
    "Caucasus Standard Time": "Asia/Yerevan",
    "Afghanistan Standard Time": "Asia/Kabul",
    "West Asia Standard Time": "Asia/Tashkent",
    "Ekaterinburg Standard Time": "Asia/Yekaterinburg",
    "Pakistan Standard Time": "Asia/Karachi",
    "Qyzylorda Standard Time": "Asia/Qyzylorda",
    "India Standard Time": "Asia/Kolkata",
    "Sri Lanka Standard Time": "Asia/Colombo",
    "Nepal Standard Time": "Asia/Kathmandu",
    "Central Asia Standard Time": "Asia/Bishkek",
    "Bangladesh Standard Time": "Asia/Dhaka",
    "Omsk Standard Time": "Asia/Omsk",
    "Myanmar Standard Time": "Asia/Yangon",
    "SE Asia Standard Time": "Asia/Bangkok",
    "Altai Standard Time": "Asia/Barnaul",
    "W. Mongolia Standard Time": "Asia/Hovd",
    "North Asia Standard Time": "Asia/Krasnoyarsk",
    "N. Central Asia Standard Time": "Asia/Novosibirsk",
    "Tomsk Standard Time": "Asia/Tomsk",
    "China Standard Time": "Asia/Shanghai",
    "North Asia East Standard Time": "Asia/Irkutsk",
    "Singapore Standard Time": "Asia/Singapore",
    "W. Australia Standard Time": "Australia/Perth",
    "Taipei Standard Time": "Asia/Taipei",
    "Ulaanbaatar Standard Time": "Asia/Ulaanbaatar",
    "Aus Central W. Standard Time": "Australia/Eucla",
    "Transbaikal Standard Time": "Asia/Chita",
    "Tokyo Standard Time": "Asia/Tokyo",
    "North Korea Standard Time": "Asia/Pyongyang",
    "Korea Standard Time": "Asia/Seoul",
    "Yakutsk Standard Time": "Asia/Yakutsk",
    "Cen. Australia Standard Time": "Australia/Adelaide",
    "AUS Central Standard Time": "Australia/Darwin",
    "E. Australia Standard Time": "Australia/Brisbane",
    "AUS Eastern Standard Time": "Australia/Sydney",
    "West Pacific Standard Time": "Pacific/Port_Moresby",
    "Tasmania Standard Time": "Australia/Hobart",
    "Vladivostok Standard Time": "Asia/Vladivostok",
    "Lord Howe Standard Time": "Australia/Lord_Howe",
    "Bougainville Standard Time": "Pacific/Bougainville",
    "Russia Time Zone 10": "Asia/Srednekolymsk",
    "Magadan Standard Time": "Asia/Magadan",
    "Norfolk Standard Time": "Pacific/Norfolk",
    "Sakhalin Standard Time": "Asia/Sakhalin",
    "Central Pacific Standard Time": "Pacific/Guadalcanal",
    "Russia Time Zone 11": "Asia/Kamchatka",
    "New Zealand Standard Time": "Pacific/Auckland",
    "UTC+12": "Etc/GMT-12",
    "Fiji Standard Time": "Pacific/Fiji",
    "Chatham Islands Standard Time": "Pacific/Chatham",
    "UTC+13": "Etc/GMT-13",
    "Tonga Standard Time": "Pacific/Tongatapu",
    "Samoa Standard Time": "Pacific/Apia",
    "Line Islands Standard Time": "Pacific/Kiritimati",
}
_WINDOWS_BY_FOLDED_NAME = {name.casefold(): iana for name, iana in WINDOWS_TIME_ZONES.items()}

#: The one name that asks for the machine's own zone; nothing else ever uses it.
LOCAL_TIME_ZONE = "local"


def resolve_time_zone(name: str | tzinfo) -> tzinfo:
    """The zone a name means: an IANA name, a Windows id, ``"UTC"``, or ``"local"`` (asked for).

    Raises :class:`~celery_quartz.errors.UnknownTimeZoneError` (a :class:`ValueError`) naming
    the zone when it is unknown. The machine's local zone is used only for the explicit name
    ``"local"``.
    """
    if isinstance(name, tzinfo):
        return name
    if not isinstance(name, str) or not name.strip():
        raise UnknownTimeZoneError(f"time zone must be a non-empty name, got {name!r}")
    text = name.strip()
    if text.upper() in _FIXED_UTC_NAMES:
        return UTC
    if text == LOCAL_TIME_ZONE:
        return _local_zone()
    iana = _WINDOWS_BY_FOLDED_NAME.get(text.casefold(), text)
    try:
        return ZoneInfo(iana)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise UnknownTimeZoneError(
            f"unknown time zone {name!r}: give an IANA name such as 'Europe/Helsinki' "
            f"or a Windows id such as 'FLE Standard Time'"
        ) from None


def time_zone_name(zone: tzinfo) -> str:
    """The name :func:`resolve_time_zone` reads back into ``zone``."""
    if zone is UTC:
        return "UTC"
    key = getattr(zone, "key", None)
    if isinstance(key, str):
        return key
    if isinstance(zone, timezone) and zone.utcoffset(None) == timedelta(0):
        return "UTC"
    raise UnknownTimeZoneError(f"time zone {zone!r} has no IANA name; pass an IANA name instead")


def _local_zone() -> tzinfo:
    env = os.environ.get("TZ", "").lstrip(":")
    if env:
        try:
            return ZoneInfo(env)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            pass
    try:
        with open("/etc/localtime", "rb") as f:
            return ZoneInfo.from_file(f, key=LOCAL_TIME_ZONE)
    except OSError:
        return UTC


# -- gaps and repeats --------------------------------------------------------------------------


def offset_change(lo: datetime, hi: datetime, before: timedelta, zone: tzinfo) -> datetime:
    """The first UTC instant in ``(lo, hi]`` whose offset in ``zone`` is no longer ``before``.

    ``lo`` and ``hi`` are naive UTC; the offset at ``lo`` is ``before`` and at ``hi`` it is not.
    Offsets change on whole seconds, so a bisection over seconds finds the moment exactly. This
    is the one search for a daylight-saving change: the end of a gap and the start of a repeated
    stretch are both found with it.
    """
    low = lo.replace(microsecond=0)
    high = hi.replace(microsecond=0)
    if hi.microsecond:
        high += _ONE_SECOND
    # Invariant: offset(low) == before, offset(high) != before.
    while high - low > _ONE_SECOND:
        mid = low + (high - low) // 2
        mid = mid.replace(microsecond=0)
        if mid.replace(tzinfo=UTC).astimezone(zone).utcoffset() == before:
            low = mid
        else:
            high = mid
    return high.replace(tzinfo=UTC)


def is_in_gap(wall: datetime, zone: tzinfo) -> bool:
    """Whether the naive wall time ``wall`` does not occur in ``zone`` (a spring-forward gap)."""
    offset0 = wall.replace(tzinfo=zone).utcoffset()
    offset1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert offset0 is not None and offset1 is not None
    return offset0 < offset1


def gap_end(wall: datetime, zone: tzinfo) -> datetime:
    """The UTC instant the spring-forward gap holding the naive wall time ``wall`` ends.

    ``wall`` must be in a gap (:func:`is_in_gap`).
    """
    offset0 = wall.replace(tzinfo=zone).utcoffset()  # before the change
    offset1 = wall.replace(tzinfo=zone, fold=1).utcoffset()  # after it
    assert offset0 is not None and offset1 is not None
    return offset_change(wall - offset1, wall - offset0, offset0, zone)


def first_instant_at_or_after(wall: datetime, zone: tzinfo) -> datetime:
    """The first UTC instant whose wall time in ``zone`` is at or after the naive ``wall``.

    A wall time that occurs is read at its first pass; one that a spring-forward gap skips is
    the instant the gap ends (Quartz 4.x).
    """
    offset0 = wall.replace(tzinfo=zone).utcoffset()
    offset1 = wall.replace(tzinfo=zone, fold=1).utcoffset()
    assert offset0 is not None and offset1 is not None
    if offset0 < offset1:
        return offset_change(wall - offset1, wall - offset0, offset0, zone)
    return (wall - offset0).replace(tzinfo=UTC)
