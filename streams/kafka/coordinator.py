"""Group-coordinator admin requests (a group's committed offsets, its
members), each run in a short-lived child process.

Why a child. librdkafka's AdminClient dereferences a NULL group handle, and
the whole process dies of SIGSEGV, when the group coordinator answers
``NOT_COORDINATOR`` to ListConsumerGroupOffsets (librdkafka issue 5040,
confluent-kafka-python issue 1982; open in 2.16): an AdminClient has no
consumer group of its own (``rk_cgrp`` is NULL) to send the "find the
coordinator again" op to. That answer is exactly what a coordinator's broker
dying produces, so on a three-broker cluster one broker's death killed every
rdkafka worker at once, without a log line: the engine's takeover fence made
that call on every reassignment. librdkafka issue 5397 reports a second crash
in the same coordinator-request path (DescribeConsumerGroups and the other
coordinator-targeted admin requests), and issue 3663 an assertion (SIGABRT in
``rd_kafka_enq_once_del_source_return``) in ListConsumerGroupOffsets when
the coordinator's broker restarts: that one took the child in 3 runs of 3 on
this project's three-broker cluster (tests/cluster/test_cluster_coordinator.py).
A consumer's own requests
(``Consumer.committed()``) go through its group handle and are not affected.

So a long-running process (a worker, the console, the findings follower)
never makes these requests itself: :func:`ask` runs them in
``python -m streams.kafka.coordinator``, whose crash becomes a
:class:`~streams.errors.BrokerError` with code :data:`CRASHED` naming the
signal, and the caller's fallback applies (each caller here is best effort).
The child dies with its parent (``PR_SET_PDEATHSIG``) and is killed past its
bound. Its cost is a process start (Python and confluent-kafka's import,
~0.2-0.4 s), paid once per reassignment of an rdkafka worker and once per
start.

The request and the answer are JSON on the child's stdin and stdout (the
connection's credentials never appear on a command line).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import streams.errors as _errors
from streams.errors import BrokerError, BrokerUnreachable
from streams.kafka.connection import KafkaConnection

__all__ = [
    "CRASHED",
    "CommittedOffset",
    "GroupDescription",
    "ask",
    "committed_and_members",
    "committed_offsets",
    "describe_group",
]

log = logging.getLogger(__name__)

#: The error code of a request whose child process died of a signal.
CRASHED = "CRASHED"
#: The child's command (a list so a test can point it at another program).
CHILD_ARGV: list[str] = [sys.executable, "-m", "streams.kafka.coordinator"]
#: Seconds the child is given past the requests' own bounds (its start).
_START_S = 20.0
#: The longest stderr tail of a crashed child quoted in the error.
_TAIL = 600


@dataclass(frozen=True, slots=True)
class GroupDescription:
    """A consumer group as its coordinator describes it."""

    #: The members' client ids (an rdkafka worker's is its transactional id).
    client_ids: tuple[str, ...]
    #: The group's protocol (its partition assignor: ``range`` for
    #: librdkafka's, ``faust`` for faust's); empty while it rebalances or
    #: when the group is empty.
    protocol: str
    #: The coordinator's broker id (None when not told).
    coordinator: int | None = None


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """A partition's committed offset (-1001: none) and its metadata."""

    offset: int
    metadata: str | None


def describe_group(
    connection: KafkaConnection, group: str, *, timeout_s: float
) -> GroupDescription:
    """The members and protocol of consumer group ``group``."""
    (answer,) = ask(connection, [{"op": "describe", "group": group}], timeout_s=timeout_s)
    return answer  # type: ignore[no-any-return]


def committed_offsets(
    connection: KafkaConnection,
    group: str,
    topic: str,
    partitions: Sequence[int],
    *,
    timeout_s: float,
) -> dict[int, CommittedOffset]:
    """Group ``group``'s committed offsets of ``topic``'s ``partitions``, not
    waiting for a transaction that commits them (``require_stable`` off)."""
    request = {"op": "committed", "group": group, "topic": topic, "partitions": list(partitions)}
    (answer,) = ask(connection, [request], timeout_s=timeout_s)
    return answer  # type: ignore[no-any-return]


def committed_and_members(
    connection: KafkaConnection,
    group: str,
    topic: str,
    partitions: Sequence[int],
    *,
    timeout_s: float,
) -> tuple[dict[int, CommittedOffset], GroupDescription]:
    """:func:`committed_offsets` and :func:`describe_group` of ``group``,
    both asked in one child process (one process start: the rdkafka
    engine's takeover fence asks both on every assignment)."""
    offsets, members = ask(
        connection,
        [
            {"op": "committed", "group": group, "topic": topic, "partitions": list(partitions)},
            {"op": "describe", "group": group},
        ],
        timeout_s=timeout_s,
    )
    return offsets, members


def ask(
    connection: KafkaConnection, requests: Sequence[dict[str, Any]], *, timeout_s: float
) -> list[Any]:
    """Each of ``requests`` answered in one child process, in order: a
    :class:`GroupDescription` for ``describe``, a dict of
    :class:`CommittedOffset` for ``committed``. The first request that
    fails raises its typed error; a crash of the child raises code
    :data:`CRASHED`."""
    payload = json.dumps(
        {
            "connection": dataclasses.asdict(connection),
            "timeout_s": timeout_s,
            "requests": list(requests),
        }
    )
    bound = timeout_s * max(1, len(requests)) + _START_S
    action = ", ".join(f"{r['op']} {r['group']}" for r in requests)
    try:
        proc = subprocess.run(
            CHILD_ARGV,
            input=payload.encode(),
            capture_output=True,
            timeout=bound,
            check=False,
            env={**os.environ, "FENCEWATCH_PARENT_PID": str(os.getpid())},
        )
    except subprocess.TimeoutExpired:
        raise BrokerUnreachable(
            f"{action}: no answer within {bound:.0f} s", code="_TIMED_OUT", retriable=True
        ) from None
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        tail = proc.stderr.decode("utf-8", "replace")[-_TAIL:].strip().replace("\n", " | ")
        log.warning(
            "the coordinator request (%s) crashed its child process (%s: librdkafka issue "
            "5040, the reason it runs in a child); the caller goes on without it. Its "
            "stderr ended: %s",
            action,
            name,
            tail or "(nothing)",
        )
        raise BrokerError(f"{action}: the request's process died of {name}", code=CRASHED)
    try:
        answer = json.loads(proc.stdout)
        results = answer["results"]
    except (ValueError, KeyError, TypeError):
        tail = proc.stderr.decode("utf-8", "replace")[-_TAIL:].strip()
        raise BrokerError(
            f"{action}: the request's process exited {proc.returncode} without an answer"
            + (f" ({tail})" if tail else "")
        ) from None
    return [_decode(r) for r in results]


def _decode(result: dict[str, Any]) -> Any:
    if "error" in result:
        e = result["error"]
        kind = getattr(_errors, str(e.get("kind")), BrokerError)
        if not (isinstance(kind, type) and issubclass(kind, BrokerError)):
            kind = BrokerError
        raise kind(str(e["message"]), code=str(e["code"]), retriable=bool(e["retriable"]))
    ok = result["ok"]
    if ok["op"] == "describe":
        return GroupDescription(tuple(ok["client_ids"]), str(ok["protocol"]), ok.get("coordinator"))
    return {int(p): CommittedOffset(int(o), m) for p, (o, m) in sorted(ok["offsets"].items())}


# -- the child ---------------------------------------------------------------


def _serve(request: dict[str, Any], admin: Any, timeout_s: float) -> dict[str, Any]:
    from streams.kafka.errors import kafka_errors

    group = request["group"]
    if request["op"] == "describe":
        with kafka_errors(f"describing consumer group {group}"):
            futures = admin.describe_consumer_groups([group], request_timeout=timeout_s)
            desc = futures[group].result(timeout=timeout_s + 5)
        return {
            "op": "describe",
            "client_ids": sorted(m.client_id for m in (desc.members or ())),
            "protocol": str(desc.partition_assignor or ""),
            "coordinator": desc.coordinator.id if desc.coordinator is not None else None,
        }
    if request["op"] == "committed":
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        topic = request["topic"]
        wanted = ConsumerGroupTopicPartitions(
            group, [TopicPartition(topic, p) for p in request["partitions"]]
        )
        with kafka_errors(f"committed offsets of group {group}"):
            futures = admin.list_consumer_group_offsets(
                [wanted], require_stable=False, request_timeout=timeout_s
            )
            answer = futures[group].result(timeout=timeout_s + 5)
        return {
            "op": "committed",
            "offsets": {
                str(tp.partition): [int(tp.offset), tp.metadata or None]
                for tp in answer.topic_partitions
            },
        }
    raise ValueError(f"unknown request {request['op']!r}")


def main() -> int:
    """The child: one JSON request on stdin, one JSON answer on stdout."""
    import faulthandler

    # A native crash writes every thread's Python stack to stderr, which the
    # parent quotes (the crash of librdkafka issue 5040 is in its own thread).
    faulthandler.enable(all_threads=True)
    from streams.lifeline import die_with_parent

    parent = os.environ.get("FENCEWATCH_PARENT_PID")
    if parent and not die_with_parent(int(parent), signal.SIGKILL):
        return 1  # the parent is gone: nobody to answer
    from confluent_kafka.admin import AdminClient

    from streams.kafka.errors import translate

    doc = json.loads(sys.stdin.buffer.read())
    conn = KafkaConnection(**doc["connection"])
    timeout_s = float(doc["timeout_s"])
    admin = AdminClient(conn.librdkafka())
    results: list[dict[str, Any]] = []
    for request in doc["requests"]:
        try:
            results.append({"ok": _serve(request, admin, timeout_s)})
        except Exception as exc:
            err = translate(exc, f"{request['op']} {request['group']}")
            results.append(
                {
                    "error": {
                        "kind": type(err).__name__,
                        "code": err.code,
                        "retriable": err.retriable,
                        "message": str(err),
                    }
                }
            )
    sys.stdout.write(json.dumps({"results": results}))
    sys.stdout.flush()
    # No destructor runs in this short-lived process: a client torn down
    # while the coordinator moves is another of librdkafka's crash paths.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
