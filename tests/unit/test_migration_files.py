"""The migration files as :func:`celery_quartz.store.migrate.packaged_head` reads them, checked
against Alembic; and a node whose tables are current starts without importing Alembic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from celery_quartz.errors import SchemaVersionError
from celery_quartz.store import migrate
from celery_quartz.store.engine import create_store_engine
from celery_quartz.table_prefix import DEFAULT_TABLE_PREFIX

REPO = Path(__file__).resolve().parents[2]


def test_each_file_is_named_by_its_revision_one_after_another_to_alembics_head() -> None:
    script = ScriptDirectory.from_config(migrate._config(None, DEFAULT_TABLE_PREFIX))
    chain = list(reversed(list(script.walk_revisions())))  # oldest first
    for number, revision in enumerate(chain, start=1):
        assert revision.revision == f"{number:04d}"
        assert Path(revision.path).name.startswith(f"{number:04d}_")
        assert revision.down_revision == (f"{number - 1:04d}" if number > 1 else None)
    assert migrate.packaged_head() == migrate.head_revision() == chain[-1].revision


def test_the_revision_of_tables_at_head_missing_and_with_two_rows(tmp_path: Path) -> None:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'q.db'}")
    assert migrate.current_revision(engine) is None
    migrate.upgrade(engine)
    assert migrate.current_revision(engine) == migrate.head_revision()
    assert migrate.current_revision(engine, "other_") is None
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO quartz_alembic_version VALUES ('0001')")
    with pytest.raises(SchemaVersionError, match=r"several revisions: 0001, \d{4}"):
        migrate.current_revision(engine)
    engine.dispose()


def test_a_node_on_current_tables_starts_without_importing_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    code = (
        "import sys\n"
        "from celery_quartz.config import Settings\n"
        "from celery_quartz.store import open_store, check_worker_schema\n"
        f"settings = Settings(store_url={url!r})\n"
        "check_worker_schema(settings)\n"
        "open_store(settings, upgrade_schema=True).dispose()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
