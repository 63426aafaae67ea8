"""A real ``celery beat`` process with ``quartz_scheduling_files`` loads the file at start, and
a real worker runs what its trigger fires."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, select

from tests.integration import ledger_app
from tests.integration.processes import processes, wait_for

FILE = """\
<job-scheduling-data>
  <schedule>
    <job><name>recorder</name><group>files</group><job-type>ledger.record</job-type></job>
    <trigger>
      <simple>
        <name>every-second</name>
        <group>files</group>
        <job-name>recorder</job-name>
        <job-group>files</job-group>
        <repeat-count>-1</repeat-count>
        <repeat-interval>1000</repeat-interval>
      </simple>
    </trigger>
  </schedule>
</job-scheduling-data>
"""


def _recorded(url: str) -> list[tuple[str, str]]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            table = ledger_app.ledger
            rows = conn.execute(select(table.c.trigger_group, table.c.trigger_name)).all()
    finally:
        engine.dispose()
    return [(r.trigger_group, r.trigger_name) for r in rows]


def test_a_scheduling_files_trigger_fires_under_a_real_beat(
    tmp_path: Path, pg_url: str, redis_url: str
) -> None:
    path = tmp_path / "quartz_jobs.xml"
    path.write_text(FILE)
    ledger_app.prepared_store(pg_url).dispose()
    env = ledger_app.environment(pg_url, redis_url, SCHEDULING_FILES=str(path))
    with processes(tmp_path, env) as procs:
        procs.beat("beat1")
        procs.worker("worker1", concurrency=2)
        wait_for(
            lambda: len(_recorded(pg_url)) >= 3,
            timeout=60,
            message="three firings of the file's trigger recorded by the worker",
        )
        procs.assert_running("beat1", "worker1")
        assert "scheduling files" in procs.log("beat1")
    assert set(_recorded(pg_url)) == {("files", "every-second")}
