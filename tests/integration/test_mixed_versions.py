"""Mixed versions in one cluster, as a rolling upgrade runs it: a beat and a worker of an earlier
commit of this repository (the commit before the newest schema migration, checked out by the test
with ``git worktree``) on one PostgreSQL database; the schema upgraded to this version's head
under them; this version's beat and worker started beside them; then the old nodes restarted one
by one onto this version. The ledger shows every occurrence started once throughout.

The old nodes run with this test's interpreter and virtualenv, with ``PYTHONPATH`` at the old
tree, and print the file their ``celery_quartz`` was imported from: the test checks it is the old
tree's. Without git history (a shallow clone) the old tree cannot be made and the test fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from celery_quartz import SimpleTrigger, TriggerKey
from celery_quartz.clock import to_millis
from celery_quartz.store import SqlStore, migrate
from tests.integration import ledger_app
from tests.integration.processes import REPO, Processes, processes, wait_for

VERSIONS = Path("celery_quartz/migrations/versions")
GROUP = "mixed"
#: Runs Celery's umbrella command after printing where ``celery_quartz`` came from.
OLD_LAUNCHER = [
    sys.executable,
    "-c",
    "import sys, celery_quartz; "
    "print('celery_quartz imported from', celery_quartz.__file__, flush=True); "
    "sys.argv[0] = 'celery'; "
    "from celery.__main__ import main; main()",
]
#: Schedules the test's triggers with the package on PYTHONPATH (the old one): store URL and
#: the first fire time (a POSIX timestamp) as arguments.
SCHEDULE = """
import sys
from datetime import datetime, timedelta, timezone
from celery_quartz import Job, JobKey, Quartz, SimpleTrigger, TriggerKey
from celery_quartz.store import SqlStore
from tests.integration import ledger_app

store = SqlStore(sys.argv[1], scheduler_name="ledger_app")
start = datetime.fromtimestamp(float(sys.argv[2]), timezone.utc)
Quartz(ledger_app.app, store=store).schedule_jobs([
    (
        Job(key=JobKey(f"job-{i}", "mixed"), task="ledger.record"),
        [SimpleTrigger(key=TriggerKey(f"t-{i}", "mixed"), start_at=start,
                       repeat_interval=timedelta(seconds=interval), repeat_count=-1)],
    )
    for i, interval in enumerate(INTERVALS)
])
store.dispose()
"""
INTERVALS = (0.5, 0.75, 1.0, 1.25)
SCHEDULE = SCHEDULE.replace("INTERVALS", repr(INTERVALS))


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def _migrations(tree: Path) -> list[str]:
    return sorted(p.name for p in (tree / VERSIONS).glob("[0-9][0-9][0-9][0-9]_*.py"))


@pytest.fixture
def old_tree(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A worktree of the commit before the one that added the newest migration, and that
    commit's id. Fails (never skips) when it cannot be made."""
    newest = VERSIONS / _migrations(REPO)[-1]
    target = tmp_path / "old-tree"
    try:
        # The commit of main's own line that brought it in: a merge is read against its first
        # parent, so a migration added (or renamed into place) on a merged branch counts too.
        added = _git(
            "log", "--first-parent", "-m", "--diff-filter=A", "--format=%H", "-1", "--", str(newest)
        )
        assert added, f"no commit adds {newest} (is the clone shallow?)"
        commit = _git("rev-parse", f"{added}^")
        _git("worktree", "add", "--detach", str(target), commit)
    except (subprocess.CalledProcessError, AssertionError, OSError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        pytest.fail(f"cannot check out the commit before {newest}'s: {detail}")
    try:
        yield target, commit
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(target)],
            capture_output=True,
            check=False,
            timeout=60,
        )


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"{argv[:3]} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _ledger(url: str) -> list[tuple[str, int, str | None, str | None, float]]:
    return [
        (r.trigger_name, r.scheduled_ms, r.fired_by, r.worker, r.started)
        for r in ledger_app.ledger_rows(url)
    ]


def _starts_since(url: str, since: float, **match: str) -> list[tuple[str | None, str | None]]:
    """(fired_by, worker) of the starts after ``since``, whose fields contain ``match``'s."""
    found = []
    for _name, _ms, fired_by, worker, started in _ledger(url):
        fields = {"fired_by": fired_by or "", "worker": worker or ""}
        if started > since and all(v in fields[k] for k, v in match.items()):
            found.append((fired_by, worker))
    return found


@pytest.mark.slow
def test_old_and_new_nodes_share_a_cluster_through_a_schema_upgrade_and_a_rolling_restart(
    tmp_path: Path, old_tree: tuple[Path, str], pg_url: str, redis_url: str
) -> None:
    old, commit = old_tree
    old_head = _migrations(old)[-1][:4]
    assert old_head != migrate.head_revision(), "the old tree has this version's newest migration"
    # As in production: the schema is upgraded by one command; this version's nodes check it.
    env = ledger_app.environment(pg_url, redis_url, CHECKIN_THRESHOLD="5", SCHEMA_AUTO_UPGRADE="0")
    old_env = {**env, "PYTHONPATH": str(old)}
    workdir = tmp_path / "run"
    workdir.mkdir()
    full_old_env = {**os.environ, **old_env}

    # The old version's schema, made by the old version; the ledger beside it; the triggers
    # scheduled by the old version's client.
    _run(
        [
            sys.executable,
            "-c",
            "import sys; from celery_quartz.store import migrate; "
            "from celery_quartz.store.engine import create_store_engine; "
            "migrate.upgrade(create_store_engine(sys.argv[1]))",
            pg_url,
        ],
        full_old_env,
        workdir,
    )
    store = SqlStore(pg_url, scheduler_name="ledger_app")
    assert migrate.current_revision(store.engine) == old_head
    ledger_app.create_ledger(pg_url)
    start = datetime.now(timezone.utc) + timedelta(seconds=4)
    _run([sys.executable, "-c", SCHEDULE, pg_url, str(start.timestamp())], full_old_env, workdir)

    old_procs = Processes(workdir, old_env, launcher=OLD_LAUNCHER)
    try:
        with processes(workdir, env) as new_procs:
            # 1. The old version alone, on its own schema.
            old_procs.worker("worker-old", concurrency=2)
            old_procs.beat("beat-old")
            wait_for(lambda: len(_ledger(pg_url)) >= 4, timeout=40, message="old nodes firing")
            for name in ("worker-old", "beat-old"):
                imported = re.search(r"celery_quartz imported from (\S+)", old_procs.log(name))
                assert imported, old_procs.log(name)[-2000:]
                assert Path(imported[1]).is_relative_to(old), imported[1]

            # 2. The schema first, with this version's command, under the running old nodes.
            upgraded = _run(
                [sys.executable, "-m", "celery", "-A", ledger_app.__name__, "quartz", "schema",
                 "upgrade"],
                {**os.environ, **new_procs.env},
                workdir,
            )  # fmt: skip
            assert migrate.current_revision(store.engine) == migrate.head_revision(), upgraded

            # 3. This version's nodes beside the old ones: one cluster, one queue.
            new_procs.worker("worker-new", concurrency=2)
            new_procs.beat("beat-new")
            mixed = time.time()
            beats = {
                "old": f"-{old_procs.procs['beat-old'].pid}-",
                "new": f"-{new_procs.procs['beat-new'].pid}-",
            }

            def crossed() -> set[tuple[str, str]]:
                """(beat, worker) versions that have met since the new nodes started."""
                return {
                    (beat, worker)
                    for beat, instance in beats.items()
                    for worker in ("old", "new")
                    if _starts_since(pg_url, mixed, fired_by=instance, worker=f"worker-{worker}@")
                }

            # Each version's beat fires for each version's worker: the messages, fired rows
            # and check-ins of one are read by the other.
            wait_for(
                lambda: len(crossed()) == 4,
                timeout=40,
                interval=1,
                message="each version's beat to fire for each version's worker",
            )
            old_procs.assert_running("beat-old", "worker-old")
            new_procs.assert_running("beat-new", "worker-new")

            # 4. The old beat restarted onto this version, then the old worker.
            assert old_procs.stop("beat-old") == 0, old_procs.log("beat-old")[-4000:]
            new_procs.beat("beat-old-upgraded")
            time.sleep(5)
            assert old_procs.stop("worker-old") == 0, old_procs.log("worker-old")[-4000:]
            new_procs.worker("worker-old-upgraded", concurrency=2)
            restarted = time.time()
            wait_for(
                lambda: bool(_starts_since(pg_url, restarted, worker="worker-old-upgraded")),
                timeout=30,
                message="the restarted worker to run firings",
            )
            time.sleep(3)
            new_procs.assert_running("beat-new", "worker-new", "beat-old-upgraded")

            stopped = datetime.now(timezone.utc)
            for name in ("beat-new", "beat-old-upgraded"):
                assert new_procs.stop(name) == 0, new_procs.log(name)[-4000:]
            all_stopped = datetime.now(timezone.utc)
            wait_for(lambda: not store.firing_states(), timeout=30, message="fired rows to drain")
    finally:
        old_procs.stop_all()
        store.dispose()

    rows = _ledger(pg_url)
    executed = {(name, ms) for name, ms, *_ in rows}
    due: set[tuple[str, int]] = set()
    possible: set[tuple[str, int]] = set()
    for i, interval in enumerate(INTERVALS):
        trigger = SimpleTrigger(
            key=TriggerKey(f"t-{i}", GROUP),
            start_at=start,
            repeat_interval=timedelta(seconds=interval),
            repeat_count=-1,
        )
        t: datetime | None = start
        while t is not None and t <= all_stopped + timedelta(seconds=2):
            possible.add((f"t-{i}", to_millis(t)))
            if t <= stopped - timedelta(seconds=2):
                due.add((f"t-{i}", to_millis(t)))
            t = trigger.next_fire_time_after(t)
    print(
        f"\nold commit {commit[:10]} (schema {old_head}) beside {migrate.head_revision()}: "
        f"{len(rows)} starts by workers {sorted({w or '' for *_, w, _ in rows})}"
    )
    assert ledger_app.row_count(pg_url, ledger_app.duplicates) == 0, "an occurrence started twice"
    assert ledger_app.row_count(pg_url, ledger_app.recoveries) == 0, (
        "a live worker's firing recovered"
    )
    assert due - executed == set(), f"never ran: {sorted(due - executed)}"
    assert executed <= possible, f"not occurrences: {sorted(executed - possible)}"
