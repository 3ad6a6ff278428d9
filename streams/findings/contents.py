"""What a record on the wrong topic is, so that a command pointed at it can
name the command that reads it (``findings --topic ownership.status`` used
to suggest ``audit --topic``)."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["reader_command", "reader_hint", "record_kind"]

#: Record kind -> the command that reads a topic of them.
_READERS = {
    "events": "fencewatch audit --topic",
    "findings": "fencewatch findings --topic",
    "status records": "fencewatch status --topic",
}


def record_kind(value: bytes | None) -> str | None:
    """``"events"``, ``"findings"`` or ``"status records"`` by the fields a
    record has (SPEC §2, §6, §8), else None."""
    if value is None:
        return None
    try:
        doc: Any = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    if "finding_id" in doc and "kind" in doc:
        return "findings"
    if "current_epoch" in doc and ("open" in doc or "stale_epochs" in doc):
        return "status records"
    if "type" in doc and "epoch" in doc:
        return "events"
    return None


def reader_command(kind: str, topic: str) -> str:
    """The command that reads a topic of ``kind`` records."""
    return f"{_READERS[kind]} {topic}"


def reader_hint(kind: str | None, topic: str) -> str:
    """``"; it holds findings: read it with fencewatch findings --topic T"``,
    or ``""`` when the kind is unknown."""
    if kind is None:
        return ""
    return f"; it holds {kind}: read it with {reader_command(kind, topic)}"
