"""Read the compacted status topic (SPEC §8): where every workflow stands now.

A bounded read, from the log start to the end offsets captured at start, no
consumer group; the last record of each key wins (the topic is compacted,
but its uncompacted head can still hold older records of a key), and a
tombstone (null value) removes the key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from streams.core.records import SEVERITY_RANK, Severity
from streams.core.status import WorkflowStatus
from streams.errors import FencewatchError, StatusTopicError
from streams.findings.contents import reader_command, record_kind
from streams.kafka.connection import KafkaConnection
from streams.kafka.tail import TopicTail
from streams.kafka.topics import DEFAULT_STATUS_TOPIC

__all__ = [
    "DEFAULT_MAX_WORKFLOWS",
    "DEFAULT_STATUS_TOPIC",
    "StatusTopicError",
    "read_status",
    "select_status",
    "worst_first",
]

#: Workflows a status read holds at most (one small record each).
DEFAULT_MAX_WORKFLOWS = 2_000_000


def read_status(
    connection: KafkaConnection,
    topic: str = DEFAULT_STATUS_TOPIC,
    *,
    max_workflows: int = DEFAULT_MAX_WORKFLOWS,
) -> dict[str, dict[str, Any]]:
    """The latest status record per workflow key."""
    out: dict[str, dict[str, Any]] = {}
    tail = TopicTail(connection, topic, stop_at_end=True)
    try:
        while not tail.finished:
            rec = tail.poll(30.0)
            if rec is None:
                if tail.finished:
                    break
                raise FencewatchError(f"no record from {topic} within 30 s")
            key = (rec.key or b"").decode("utf-8", "replace")
            if rec.value is None:
                out.pop(key, None)
                continue
            try:
                doc = orjson.loads(rec.value)
                # The key orders and selects the records: a string, or the
                # sort and --prefix would fail on this record (a traceback).
                # Checked first: the compiled core's own check of the typed
                # record says only "str object expected; got int".
                if type(doc["workflow_key"]) is not str:
                    raise TypeError(
                        f"workflow_key must be a string, got {type(doc['workflow_key']).__name__}"
                    )
                # The typed record (streams.core.status) checks every field is there.
                WorkflowStatus.from_dict(doc)
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                kind = record_kind(rec.value)
                # The wrong topic: name the command that reads it.
                if kind is not None and kind != "status records":
                    raise StatusTopicError(
                        f"{topic} holds {kind}, not status records (SPEC §8): "
                        f"read it with {reader_command(kind, topic)}"
                    ) from None
                detail = f"{exc.args[0]}: is required" if isinstance(exc, KeyError) else str(exc)
                raise StatusTopicError(
                    f"{topic}/{rec.partition}@{rec.offset} is not a status record (SPEC §8): "
                    f"{detail}"
                ) from None
            if doc["workflow_key"] not in out and len(out) >= max_workflows:
                raise StatusTopicError(f"more than {max_workflows} workflows on {topic}")
            out[doc["workflow_key"]] = doc
    finally:
        tail.close()
    return out


_SEVERITIES = frozenset(s.value for s in Severity)


def _rank(doc: Mapping[str, Any]) -> int:
    worst = doc.get("worst_open")
    # Not a severity (the topic is not ours to trust): ranked as none, not a traceback.
    return SEVERITY_RANK[Severity(worst)] if type(worst) is str and worst in _SEVERITIES else -1


def worst_first(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Worst open severity first, then most open findings, then by key."""
    return sorted(docs, key=lambda d: (-_rank(d), -len(d.get("open") or ()), d["workflow_key"]))


def select_status(
    docs: Iterable[dict[str, Any]],
    *,
    open_only: bool = False,
    workflows: frozenset[str] = frozenset(),
    prefix: str | None = None,
) -> list[dict[str, Any]]:
    """The records kept by ``--open``, ``--workflow`` and ``--prefix``."""
    out = []
    for d in docs:
        key = d["workflow_key"]
        if (workflows or prefix is not None) and not (
            key in workflows or (prefix is not None and key.startswith(prefix))
        ):
            continue
        if open_only and not d.get("open"):
            continue
        out.append(d)
    return out
