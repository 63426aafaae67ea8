"""Kombu's filesystem transport, each message file written whole before a consumer can take it.

Kombu's ``filesystem://`` transport creates a message file under its final name and then writes
it. A consumer listing the folder in between moves the still-empty file away and fails to decode
it: the worker stops with ``Unrecoverable error: JSONDecodeError``, and the message is lost.
This transport writes each message under a name no consumer takes, then renames it into place
(atomic within one filesystem). The examples' no-server broker uses it::

    app = Celery("proj", broker="filesystem://")
    filesystem_broker.configure(app, Path("var") / "broker")

:func:`configure` sets ``broker_transport`` to :class:`Transport`, with kombu's
``broker_transport_options`` (``data_folder_in``, ``data_folder_out``, ``processed_folder``,
``control_folder``) all under one folder. It is a broker for demos and tests on one machine, as
kombu's is.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    """Puts a message as a staged file (``<uuid>.staged``, which no queue's consumer reads),
    renamed to kombu's name for it (``<ms>_<uuid>.<queue>.msg``) once written."""

    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]  # kombu names the argument two ways
        folder = self.data_folder_out
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        staged = os.path.join(folder, f"{uuid.uuid4()}.staged")
        try:
            with open(staged, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(staged, os.path.join(folder, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory {folder!r}") from exc


class Transport(filesystem.Transport):
    """Kombu's filesystem transport with :class:`Channel`."""

    Channel = Channel


def configure(app: Any, folder: Path | str, *, polling_interval: float = 0.1) -> None:
    """Make ``app``'s ``filesystem://`` broker this module's :class:`Transport`, its queues,
    processed messages and control files under ``folder`` (created if missing). Every process
    of the app (beats, workers, the CLI) must name the same folder, so give an absolute one:
    kombu's default control folder is ``./control``, wherever each process runs."""
    folder = Path(folder).absolute()
    (folder / "processed").mkdir(parents=True, exist_ok=True)
    app.conf.broker_transport = f"{__name__}:Transport"
    app.conf.broker_transport_options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "polling_interval": polling_interval,
    }
