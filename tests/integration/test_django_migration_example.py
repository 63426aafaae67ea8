"""examples/django-migration runs as its README says: the README's one command imports a
django-celery-beat schedule (dry run, import, import again), shows the triggers and lets beat fire
one of them on a worker. Its source tables are the ones django-celery-beat's migrations create."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.integration.processes import REPO

EXAMPLE = REPO / "examples" / "django-migration"


def readme_command() -> list[str]:
    """The one command under the README's "Run it", with this interpreter for ``python``."""
    readme = (EXAMPLE / "README.md").read_text()
    section = readme.split("\n## Run it\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README.md: no sh block under 'Run it'"
    lines = block.group(1).strip().splitlines()
    assert len(lines) == 1, f"README.md: 'Run it' shows {len(lines)} commands, not one"
    argv = shlex.split(lines[0])
    assert argv[0] == "python", argv
    return [sys.executable, *argv[1:]]


@pytest.mark.slow
def test_the_readme_command_imports_the_schedule_and_beat_fires_it() -> None:
    result = subprocess.run(
        readme_command(), cwd=EXAMPLE, capture_output=True, text=True, timeout=120
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    group = "django-celery-beat -> group django_celery_beat"
    assert f"would change {group}: 5 added, 0 updated, 0 removed, 0 unchanged, 2 skipped" in out
    assert f"\n{group}: 5 added, 0 updated, 0 removed, 0 unchanged, 2 skipped" in out
    assert f"\n{group}: 0 added, 0 updated, 0 removed, 5 unchanged, 2 skipped" in out
    assert "! skipped garden lights at sunset: solar schedule (sunset) cannot be" in out
    assert "! skipped export csv (legacy): task 'legacy.tasks.export_csv' is not registered" in out
    # The triggers as `quartz triggers` lists them.
    assert re.search(r"daily digest +WAITING .* cron 0 30 8 \? \* 2-6 Europe/Helsinki ", out), out
    assert re.search(r"django_celery_beat\.disabled +rebuild search index +PAUSED ", out), out
    # `quartz fire-times`: weekday mornings at 08:30 Helsinki time.
    mornings = re.findall(r"^(Mon|Tue|Wed|Thu|Fri) \S+T08:30:00\+0[23]:00 ", out, re.M)
    assert len(mornings) == 3, out
    fired = re.search(
        r"'sync inventory' ran [\d.]+s after the start: occurrence [\d:]+ UTC, fired by "
        r"scheduler \S+, run by worker@\S+ with args (.+)$",
        out,
        re.M,
    )
    assert fired is not None and json.loads(fired.group(1)) == ["warehouse-1"], out
    checks = re.findall(r"^  \[(ok|FAILED)\] ", out, re.M)
    assert checks == ["ok"] * 6, out
    assert "OK: django-celery-beat's schedule runs on celery-quartz" in out


def _source_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("django_migration_source", EXAMPLE / "source.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# django-celery-beat's migrations, run by Django in a process of its own (Django's settings are
# global to a process, and the importer's own tests configure them differently).
_MIGRATED_COLUMNS = """
import json, sys
import django
from django.conf import settings
settings.configure(
    INSTALLED_APPS=["django_celery_beat"],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": sys.argv[1]}},
    USE_TZ=True,
    TIME_ZONE="UTC",
)
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", verbosity=0)
with connection.cursor() as cursor:
    tables = [t for t in connection.introspection.table_names(cursor)
              if t.startswith("django_celery_beat_")]
    json.dump({t: {c.name: bool(c.null_ok)
                   for c in connection.introspection.get_table_description(cursor, t)}
               for t in tables}, sys.stdout)
"""


def test_the_source_tables_are_the_ones_django_celery_beat_migrations_create(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _MIGRATED_COLUMNS, str(tmp_path / "migrated.sqlite3")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    migrated = json.loads(result.stdout)
    source = _source_module()
    ours = {
        table.name: {column.name: bool(column.nullable) for column in table.columns}
        for table in source.metadata.sorted_tables
    }
    assert "django_celery_beat_periodictask" in migrated
    # Every column, and whether it may be NULL, as django-celery-beat's migrations make them.
    assert ours == migrated
