"""Real ``celery beat`` and ``celery worker`` processes for the integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = "tests.integration.ledger_app"


class Processes:
    """Starts beat and worker processes of the ledger app with one environment; stops them all.

    ``launcher`` is the command that runs Celery's umbrella command; arguments follow it. By
    default that is ``python -m tests.integration.celery_command``: ``python -m celery`` without
    Flower's plugin, which only :meth:`flower` needs (see that module)."""

    def __init__(
        self, workdir: Path, env: dict[str, str], launcher: list[str] | None = None
    ) -> None:
        self.workdir = workdir
        self.env = {**os.environ, "PYTHONPATH": str(REPO), **env}
        self.launcher = launcher or [sys.executable, "-m", "tests.integration.celery_command"]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[object] = []

    def _start(
        self,
        name: str,
        argv: list[str],
        app: str = APP,
        launcher: list[str] | None = None,
    ) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop_all
        self._logs.append(log)
        proc = subprocess.Popen(
            [*(launcher or self.launcher), "-A", app, *argv],
            cwd=self.workdir,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own process group: kill() takes a prefork worker's pool children with it.
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def beat(self, name: str) -> subprocess.Popen[bytes]:
        return self._start(
            name,
            [
                "beat",
                "-S",
                "celery_quartz.Scheduler",
                "-l",
                "info",
                "--pidfile=",
                "-s",
                str(self.workdir / f"{name}-schedule"),
            ],
        )

    def worker(
        self,
        name: str,
        concurrency: int = 4,
        queues: str | None = None,
        extra: list[str] | None = None,
        app: str = APP,
    ) -> subprocess.Popen[bytes]:
        argv = [
            "worker",
            "-l",
            "info",
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "--without-mingle",
            "--without-gossip",
        ]
        if queues:
            argv += ["-Q", queues]
        return self._start(name, argv + (extra or []), app)

    def command(self, name: str, *argv: str, timeout: float = 60) -> tuple[int, str]:
        """Run a Celery command of the app (``quartz pause trigger …``) to its end: its exit
        code and its output."""
        proc = self._start(name, list(argv))
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(name)
            raise
        return code, self.log(name)

    def flower(self, name: str, port: int) -> subprocess.Popen[bytes]:
        """Flower's web server on 127.0.0.1:``port``, watching the app's broker."""
        return self._start(
            name,
            ["flower", f"--port={port}", "--address=127.0.0.1"],
            launcher=[sys.executable, "-m", "celery"],
        )

    def kill(self, name: str) -> None:
        """SIGKILL the process and everything it started (a worker's pool processes too)."""
        proc = self.procs[name]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self, name: str, timeout: float = 30) -> int:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGUSR1)  # its stacks into its log (see ledger_app)
                time.sleep(1)
                proc.kill()
                proc.wait()
        return proc.returncode

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)
        for log in self._logs:
            log.close()  # type: ignore[attr-defined]
        self._logs.clear()

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def assert_running(self, *names: str) -> None:
        for name in names:
            code = self.procs[name].poll()
            assert code is None, f"{name} exited with {code}:\n{self.log(name)[-4000:]}"


@contextmanager
def processes(workdir: Path, env: dict[str, str]) -> Iterator[Processes]:
    """The processes of one test; stopped at the end. When the test fails inside, the end of
    each process's log is printed, so a failure on CI shows what beat and the workers did."""
    procs = Processes(workdir, env)
    try:
        yield procs
    except BaseException:
        procs.stop_all()
        for name in procs.procs:
            print(f"----- {name}.log (end) -----\n{procs.log(name)[-3000:]}")
        raise
    finally:
        procs.stop_all()


def wait_for(predicate, timeout: float, interval: float = 0.2, message: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")
