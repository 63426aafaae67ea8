"""Scheduling files: Quartz's ``quartz_jobs.xml`` (``job_scheduling_data_2_0``), the same model as
JSON (``quartz_jobs.json`` or an ``appsettings.json``'s ``Quartz:Schedule``) and as YAML, loaded
into the store idempotently and exported back.

    plan = load_scheduling_files(app, store, ["quartz_jobs.xml"])           # one transaction
    print(plan.summary())
    text = export_scheduling_data(store, "yaml")

See docs/scheduling-files.md.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from celery_quartz.audit import acting_as
from celery_quartz.clock import Clock, SystemClock
from celery_quartz.definitions import Plan, Problems, SchedulingData, Where
from celery_quartz.errors import QuartzError, SchedulingFileError, UnknownTaskError
from celery_quartz.job import DEFAULT_MAX_DATA_BYTES
from celery_quartz.scheduling_files.build import build
from celery_quartz.scheduling_files.export import document_tree
from celery_quartz.scheduling_files.json_format import read_json, write_json
from celery_quartz.scheduling_files.tree import Node
from celery_quartz.scheduling_files.xml_format import read_xml, write_xml
from celery_quartz.scheduling_files.yaml_format import read_yaml, write_yaml

if TYPE_CHECKING:
    from celery import Celery

    from celery_quartz.store.abc import JobStore

__all__ = [
    "FORMATS",
    "Plan",
    "SchedulingData",
    "SchedulingFilesWatcher",
    "export_scheduling_data",
    "load_scheduling_files",
    "parse_scheduling_data",
    "read_scheduling_file",
]

logger = logging.getLogger(__name__)

#: The formats, by name (and file extension).
FORMATS = ("xml", "json", "yaml")
_EXTENSIONS = {".xml": "xml", ".json": "json", ".yaml": "yaml", ".yml": "yaml"}
#: Largest scheduling file read.
MAX_FILE_BYTES = 64 * 1024 * 1024


def detect_format(name: str, content: str | bytes) -> str:
    """The format of a file: by its extension, else by its first character."""
    extension = os.path.splitext(name)[1].lower()
    if extension in _EXTENSIONS:
        return _EXTENSIONS[extension]
    head = content.lstrip()[:1]
    if head in ("<", b"<"):
        return "xml"
    if head in ("{", b"{"):
        return "json"
    return "yaml"


def parse_scheduling_data(
    content: str | bytes,
    source: str,
    *,
    format: str | None = None,
    max_data_bytes: int = DEFAULT_MAX_DATA_BYTES,
) -> SchedulingData:
    """Read and check one scheduling file's content (``source`` names it in errors).

    Raises :class:`SchedulingFileError` (a ``ValidationError``) naming the file, the line or
    JSON path, and the job or trigger at fault; when the file has several errors, one error
    lists them all (its ``errors``). Task names are not checked here (no app).
    """
    kind = format or detect_format(source, content)
    if kind not in FORMATS:
        raise Where(source).error(f"unknown format {kind!r}; one of {', '.join(FORMATS)}")
    if len(content) > MAX_FILE_BYTES:
        raise Where(source).error(f"is larger than {MAX_FILE_BYTES} bytes")
    problems = Problems()
    tree: Node
    if kind == "xml":
        tree = read_xml(content, source, problems)
    elif kind == "json":
        tree = read_json(content, source)
    else:
        tree = read_yaml(content, source)
    data = build(tree, max_data_bytes=max_data_bytes, problems=problems)
    problems.raise_if_any()
    return data


def read_scheduling_file(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    max_data_bytes: int = DEFAULT_MAX_DATA_BYTES,
) -> SchedulingData:
    """Read and check the scheduling file at ``path``."""
    name = os.fspath(path)
    try:
        size = os.path.getsize(name)
        if size > MAX_FILE_BYTES:
            raise Where(name).error(f"is {size} bytes; at most {MAX_FILE_BYTES}")
        with open(name, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        raise Where(name).error(f"cannot be read: {exc.strerror or exc}") from None
    return parse_scheduling_data(content, name, format=format, max_data_bytes=max_data_bytes)


def check_tasks(app: Celery, files: Sequence[SchedulingData]) -> None:
    """Every job's type is a task registered with ``app`` (DESIGN, invariant 7); one error
    names every job whose task is not."""
    app.loader.import_default_modules()
    unknown = [
        f"{definition.where}: job {definition.job.key}: task {definition.job.task!r} is not "
        f"registered with Celery app {app.main!r}"
        for data in files
        for definition in data.jobs
        if definition.job.task not in app.tasks
    ]
    if len(unknown) > 1:
        unknown.insert(0, f"{len(unknown)} jobs name a task that is not registered:")
    if unknown:
        raise UnknownTaskError("\n".join(unknown))


def load_scheduling_files(
    app: Celery,
    store: JobStore,
    paths: Sequence[str | os.PathLike[str]],
    *,
    dry_run: bool = False,
    clock: Clock | None = None,
    max_data_bytes: int | None = None,
) -> Plan:
    """Load scheduling files into ``store``, in order, as one transaction, and return what
    changed (or, with ``dry_run``, what would change: nothing is written).

    Each file's pre-processing commands run before its own jobs and triggers, under its own
    processing directives. A job or trigger that ends as it is stored is left alone, so the same
    load twice changes nothing the second time. Any error (a file that cannot be read, a task
    not registered with ``app``, a conflict with the store) raises before anything is written,
    and one error reports every error found at that step (reading, tasks, the store).
    """
    limit = store.max_data_bytes if max_data_bytes is None else max_data_bytes
    problems = Problems()
    read = [problems.read(read_scheduling_file, path, max_data_bytes=limit) for path in paths]
    problems.raise_if_any()  # every error of every file
    files = [data for data in read if data is not None]
    check_tasks(app, files)
    now = (clock or store.clock or SystemClock()).now()
    with acting_as(file_principal(paths), "file"):
        result = store.apply_scheduling_data(files, now, dry_run=dry_run)
    logger.info(
        "scheduling files %s%s: %s",
        ", ".join(os.fspath(p) for p in paths),
        " (dry run)" if dry_run else "",
        result.summary(),
    )
    return result


def file_principal(paths: Sequence[str | os.PathLike[str]]) -> str:
    """Who the audit records a load of ``paths`` as: ``file:<file name>`` (the names, comma
    separated, when several files load together)."""
    return "file:" + ",".join(os.path.basename(os.fspath(p)) for p in paths)


def export_scheduling_data(store: JobStore, format: str) -> str:
    """The store's jobs and triggers as a scheduling file in ``format`` (xml, json or yaml).

    Leaves out the groups celery-quartz keeps itself (recovery and retry one-offs,
    ``beat_schedule``) and trigger state (fire times, pauses). Raises
    :class:`SchedulingFileError` naming the trigger for a kind no file can hold
    (daily-time-interval, recurrence), and for XML, naming the key, for job data that is not a
    string.
    """
    if format not in FORMATS:
        raise SchedulingFileError(f"unknown format {format!r}; one of {', '.join(FORMATS)}")
    jobs, triggers = store.scheduled_definitions()
    tree = document_tree(jobs, triggers)
    if format == "xml":
        return write_xml(tree)
    if format == "json":
        return write_json(tree)
    return write_yaml(tree)


class SchedulingFilesWatcher:
    """Loads ``quartz_scheduling_files`` when a scheduler starts, and again when a file's
    content changes, checked every ``scan_interval`` seconds (Quartz's plugin scanInterval; 0:
    at start only).

    Every scheduler of a cluster runs one. The load is one transaction under the store's
    TRIGGER_ACCESS lock and idempotent, so when all nodes start together (or all see the same
    change) the first applies it and the others find everything unchanged: the files are applied
    once per cluster.
    """

    def __init__(
        self,
        app: Celery,
        store: JobStore,
        paths: Sequence[str],
        *,
        scan_interval: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.paths = list(paths)
        self.scan_interval = scan_interval
        self.clock = clock or store.clock
        self._digests: dict[str, str | None] = {}
        self._next_scan: datetime | None = None

    def load_at_start(self) -> Plan | None:
        """Load every file; raises on any error, so a scheduler does not start on a bad file."""
        if not self.paths:
            return None
        result = load_scheduling_files(self.app, self.store, self.paths, clock=self.clock)
        self._digests = {path: _digest(path) for path in self.paths}
        self._schedule_next()
        return result

    def maybe_reload(self) -> Plan | None:
        """When the scan is due and a file changed, load them all again. An error in the files
        is logged, not raised: the scheduler keeps running on what the store holds. A database
        error is raised (the loop retries), and the change is tried again at the next scan."""
        if not self.paths or self._next_scan is None or self.clock.now() < self._next_scan:
            return None
        self._schedule_next()
        digests = {path: _digest(path) for path in self.paths}
        if digests == self._digests:
            return None
        try:
            result = load_scheduling_files(self.app, self.store, self.paths, clock=self.clock)
        except QuartzError as exc:
            # A bad file is not read again until it changes again. (A database error is raised
            # to the loop, which retries; the change is then loaded at the next scan.)
            self._digests = digests
            logger.error("scheduling files not reloaded (the store is unchanged): %s", exc)
            return None
        self._digests = digests
        return result

    @property
    def next_scan(self) -> datetime | None:
        """When :meth:`maybe_reload` next looks at the files (None: it never does)."""
        return self._next_scan

    def _schedule_next(self) -> None:
        if self.scan_interval > 0:
            self._next_scan = self.clock.now() + timedelta(seconds=self.scan_interval)


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None
