"""The examples' no-server broker: a message file is never seen by a consumer before it is
whole (kombu's own filesystem transport creates it under its final name, then writes it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

from celery_quartz import filesystem_broker


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[Any]:
    options = {"data_folder_in": str(tmp_path), "data_folder_out": str(tmp_path)}
    with Connection(
        "filesystem://",
        transport="celery_quartz.filesystem_broker:Transport",
        transport_options=options,
    ) as conn:
        yield conn.default_channel


def test_a_consumer_polling_while_a_message_is_written_takes_nothing_until_it_is_whole(
    channel: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A consumer polls after the message's file is opened and before its content is written
    (kombu's transport, here, hands it an empty file: JSONDecodeError)."""
    from kombu.transport import filesystem

    def poll_then_encode(text: str) -> bytes:
        with pytest.raises(Empty):
            channel._get("q")
        return text.encode()

    for module in (filesystem, filesystem_broker):
        monkeypatch.setattr(module, "str_to_bytes", poll_then_encode)
    channel._put("q", {"n": 1})
    monkeypatch.undo()
    assert channel._get("q") == {"n": 1}
    with pytest.raises(Empty):
        channel._get("q")
