"""``celery -A proj quartz load`` and ``export``: what they print, their exit codes, and one-line
errors (never a traceback)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery
from click.testing import CliRunner, Result

from celery_quartz.cli import quartz
from tests.unit.quartznet_schema import assert_valid_for_quartznet
from tests.unit.scheduling_file_samples import FULL, QUARTZNET_XML


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery]:
    app = Celery("cli", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'quartz.db'}"
    for name in ("tasks.report", "tasks.ping"):

        def task() -> None: ...

        app.task(name=name, shared=False)(task)
    yield app
    app.close()


def run(app: Celery, *args: str) -> Result:
    return CliRunner().invoke(quartz, list(args), obj=SimpleNamespace(app=app))


@pytest.fixture
def full_xml(tmp_path: Path) -> Path:
    path = tmp_path / "quartz_jobs.xml"
    path.write_text(FULL["xml"])
    return path


def test_load_prints_what_changed(app: Celery, full_xml: Path) -> None:
    result = run(app, "load", str(full_xml))
    assert result.exit_code == 0, result.output
    assert "+ trigger DEFAULT.nightly" in result.output
    assert result.output.splitlines()[-1].startswith("jobs: 2 added, 0 replaced")
    again = run(app, "load", str(full_xml))
    assert again.output == (
        "jobs: 0 added, 0 replaced, 0 deleted, 2 unchanged; "
        "triggers: 0 added, 0 replaced, 0 deleted, 4 unchanged\n"
    )


def test_a_dry_run_as_json_writes_nothing(app: Celery, full_xml: Path) -> None:
    result = run(app, "load", "--dry-run", "--json", str(full_xml))
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["dry_run"] is True
    assert report["jobs"]["added"] == ["DEFAULT.ping", "nightly.report"]
    assert json.loads(run(app, "load", "--json", str(full_xml)).output)["jobs"]["added"]


def test_a_bad_file_is_one_line_and_exit_code_1(app: Celery, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"Jobs": [{"Name": "a", "JobType": "tasks.nope", "Durable": true}]}')
    result = run(app, "load", str(path))
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert f"error: {path} at $.Jobs[0]: job DEFAULT.a: task 'tasks.nope'" in result.output


def test_a_missing_file_is_exit_code_1(app: Celery, tmp_path: Path) -> None:
    result = run(app, "load", str(tmp_path / "nothing.xml"))
    assert result.exit_code == 1 and "cannot be read" in result.output


def test_usage_errors_are_exit_code_2(app: Celery) -> None:
    assert run(app, "load").exit_code == 2
    assert run(app, "export", "--format", "toml").exit_code == 2
    assert run(app, "export").exit_code == 2  # no format and no -o extension


def test_export_writes_each_format(app: Celery, tmp_path: Path) -> None:
    path = tmp_path / "quartz_jobs.xml"
    path.write_text(QUARTZNET_XML)  # what Quartz.NET's schema holds, so XML can export it
    run(app, "load", str(path))
    for fmt in ("xml", "json", "yaml"):
        out = tmp_path / f"export.{fmt}"
        result = run(app, "export", "-o", str(out))
        assert result.exit_code == 0, result.output
        assert run(app, "export", "--format", fmt).output == out.read_text()
    assert_valid_for_quartznet((tmp_path / "export.xml").read_text())


def test_a_file_with_several_errors_names_each(app: Celery, tmp_path: Path) -> None:
    path = tmp_path / "bad.xml"
    path.write_text(
        "<job-scheduling-data>\n<schedule>\n<job><name>a</name></job>\n"
        "<job><name>b</name><job-type>tasks.ping</job-type><durable>maybe</durable></job>\n"
        "</schedule>\n</job-scheduling-data>\n"
    )
    result = run(app, "load", str(path))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"error: 2 errors in {path}" in result.output
    assert f"{path}:3: job DEFAULT.a: job-type is required" in result.output
    assert f"{path}:4: job DEFAULT.b: durable must be true or false" in result.output


def test_an_unreachable_store_is_one_line(tmp_path: Path) -> None:
    app = Celery("cli", set_as_current=False)
    app.conf.quartz_store_url = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}"
    result = run(app, "export", "--format", "json")
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
