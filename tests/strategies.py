"""Hypothesis strategies for fencewatch tests (all of them live here, one module).

The workflow generator writes small, realistic ownership histories in position
order: owners acquire increasing epochs (sometimes only implicitly, by acting
first), make progress, attempt, commit and get rejected; displaced owners
sometimes resume (stale evidence); clients retry commits; the coordination store
sometimes misbehaves (epoch reuse, regression); transports redeliver exact
copies. Arrival order is then a separate choice (a permutation), so tests can
hold the SPEC's "any arrival order gives the same findings" against it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from streams.core import Event, EventType

__all__ = [
    "EFFECTS",
    "SINKS",
    "WORKERS",
    "arrival_orders",
    "epoch_worker_columns",
    "multi_workflow_events",
    "partly_sequenced",
    "random_clocks",
    "redelivery",
    "takeover_workflow",
    "with_sinks",
    "workflow_events",
]

WORKERS = ("alpha", "beta", "gamma", "delta")
# Few effect keys so commits collide (duplicates, conflicts) often.
EFFECTS = ("release index", "ledger row 7", "email receipt")

_ACTIONS = (
    # Weighted by repetition: most steps are ordinary work by the current owner.
    "advance",
    "advance",
    "progress",
    "progress",
    "attempt",
    "attempt_commit",
    "attempt_commit",
    "commit",
    "reject",
    "attempt_reject",
    "verify",
    "release",
    "retry",
    "redeliver",
    "reuse",
    "regress",
    "split_brain",
)


@st.composite
def workflow_events(
    draw: st.DrawFn,
    key: str = "wf",
    *,
    max_steps: int = 16,
    with_seq: bool = True,
) -> list[Event]:
    """One workflow's events in position order (ascending ``seq`` when ``with_seq``).

    Every event has an ``event_id``; redelivered copies repeat it exactly. Without
    seq, the list order is meant to be the arrival order.
    """
    n_epochs = draw(st.integers(1, 4))
    epochs = [draw(st.integers(0, 40))]
    for _ in range(n_epochs - 1):
        epochs.append(epochs[-1] + draw(st.integers(1, 3)))
    owners = [draw(st.sampled_from(WORKERS)) for _ in epochs]
    # About a quarter of the epochs are acquired only implicitly (they act first).
    implied = [draw(st.integers(0, 3)) == 0 for _ in epochs]
    steps = draw(st.lists(st.sampled_from(_ACTIONS), min_size=2, max_size=max_steps))

    out: list[Event] = []
    seq = draw(st.integers(0, 5))
    current = -1
    last_commit: Event | None = None

    def emit(
        etype: EventType, idx: int, effect: str | None = None, worker: str | None = None
    ) -> Event:
        nonlocal seq
        seq += draw(st.integers(1, 3))
        event = Event(
            type=etype,
            workflow_key=key,
            epoch=epochs[idx],
            worker_id=worker or owners[idx],
            seq=seq if with_seq else None,
            effect_key=effect,
            event_id=f"{key}#{len(out)}",
        )
        out.append(event)
        return event

    def advance() -> None:
        nonlocal current
        if current < n_epochs - 1:
            current += 1
            if not implied[current]:
                emit(EventType.LEASE_ACQUIRED, current)

    def actor() -> int:
        # Mostly the current owner; sometimes a displaced one resuming (stale).
        lag = draw(st.sampled_from((0, 0, 1, 1, 2)))
        return max(0, current - lag)

    for step in steps:
        if current < 0 or step == "advance":
            advance()
            if step == "advance":
                continue
        effect = draw(st.sampled_from(EFFECTS))
        if step == "progress":
            emit(EventType.PROGRESS, actor())
        elif step == "attempt":
            emit(EventType.EFFECT_ATTEMPTED, actor(), effect)
        elif step == "attempt_commit":
            idx = actor()
            emit(EventType.EFFECT_ATTEMPTED, idx, effect)
            last_commit = emit(EventType.EFFECT_COMMITTED, idx, effect)
        elif step == "commit":
            last_commit = emit(EventType.EFFECT_COMMITTED, actor(), effect)
        elif step == "reject":
            emit(EventType.EFFECT_REJECTED, actor(), effect)
        elif step == "attempt_reject":
            idx = actor()
            emit(EventType.EFFECT_ATTEMPTED, idx, effect)
            emit(EventType.EFFECT_REJECTED, idx, effect)
        elif step == "verify":
            emit(EventType.OUTCOME_VERIFIED, actor(), effect)
        elif step == "release":
            emit(EventType.LEASE_RELEASED, actor())
        elif step == "retry" and last_commit is not None:
            # A client retry: the same commit again, as a new event.
            idx = epochs.index(last_commit.epoch)
            emit(EventType.EFFECT_COMMITTED, idx, last_commit.effect_key, last_commit.worker_id)
        elif step == "redeliver" and out:
            # An exact copy of an earlier event (same seq, same event_id).
            out.append(out[draw(st.integers(0, len(out) - 1))])
        elif step == "reuse" and draw(st.integers(0, 2)) == 0:
            others = [w for w in WORKERS if w != owners[current]]
            emit(EventType.LEASE_ACQUIRED, current, worker=draw(st.sampled_from(others)))
        elif step == "split_brain" and current > 0:
            # A displaced owner and the current one both commit the same effect.
            old = draw(st.integers(0, current - 1))
            pair = [old, current] if draw(st.booleans()) else [current, old]
            for idx in pair:
                last_commit = emit(EventType.EFFECT_COMMITTED, idx, effect)
        elif step == "regress" and current > 0:
            emit(EventType.LEASE_ACQUIRED, draw(st.integers(0, current - 1)))
    if not out:
        # Only implied advances were drawn: the owner shows up with a checkpoint.
        emit(EventType.PROGRESS, max(current, 0))
    return out


@st.composite
def multi_workflow_events(draw: st.DrawFn, *, with_seq: bool = True) -> list[Event]:
    """One or two workflows' events, each key's events in position order, concatenated."""
    n = draw(st.integers(1, 2))
    events: list[Event] = []
    for i in range(n):
        events += draw(workflow_events(f"wf-{i}", with_seq=with_seq))
    return events


@st.composite
def partly_sequenced(draw: st.DrawFn, events: list[Event]) -> list[Event]:
    """The same events in the same order, some of them stripped of their ``seq``
    (evidence from a producer with no authoritative sequencer: arrival order)."""
    return [
        _with(e, seq=None) if e.seq is not None and draw(st.integers(0, 3)) == 0 else e
        for e in events
    ]


def arrival_orders(events: list[Event]) -> st.SearchStrategy[list[Event]]:
    """Any arrival order of the same events."""
    return st.permutations(events)


@st.composite
def redelivery(draw: st.DrawFn, events: list[Event]) -> tuple[int, int]:
    """(i, j): redeliver events[i] again just before index j > i of the stream."""
    i = draw(st.integers(0, len(events) - 1))
    j = draw(st.integers(i + 1, len(events)))
    return i, j


_EVENT_FIELDS = (
    "type",
    "workflow_key",
    "epoch",
    "worker_id",
    "seq",
    "effect_key",
    "sink",
    "event_id",
    "run_id",
    "ts",
    "attrs",
    "v",
)


def _with(event: Event, **changes: Any) -> Event:
    """A copy of ``event`` with some fields changed (works whatever Event's base class)."""
    fields: dict[str, Any] = {name: getattr(event, name) for name in _EVENT_FIELDS}
    fields.update(changes)
    return Event(**fields)


@st.composite
def random_clocks(draw: st.DrawFn, events: list[Event]) -> list[Event]:
    """The same events with arbitrary worker clocks (``ts``), unrelated to their order.

    Exact redelivered copies keep one clock so they stay exact copies."""
    stamps: dict[tuple[str, str | None], str] = {}
    out = []
    for e in events:
        ident = (e.workflow_key, e.event_id)
        if ident not in stamps:
            second = draw(st.integers(0, 86_399))
            stamps[ident] = (
                f"2026-07-26T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
            )
        out.append(_with(e, ts=stamps[ident]))
    return out


#: Sinks effect events name (None: no sink, counted as "(unnamed)").
SINKS = ("ledger-db", "release-bucket", None)
_EFFECT_EVENT_TYPES = ("effect_attempted", "effect_committed", "effect_rejected")


@st.composite
def with_sinks(draw: st.DrawFn, events: list[Event]) -> list[Event]:
    """The same events with a sink drawn for each effect event (or none).

    Exact redelivered copies keep one sink so they stay exact copies."""
    chosen: dict[tuple[str, str | None], str | None] = {}
    out = []
    for e in events:
        if e.type.value not in _EFFECT_EVENT_TYPES:
            out.append(e)
            continue
        ident = (e.workflow_key, e.event_id)
        if ident not in chosen:
            chosen[ident] = draw(st.sampled_from(SINKS))
        out.append(_with(e, sink=chosen[ident]))
    return out


def epoch_worker_columns() -> st.SearchStrategy[tuple[list[int], list[str]]]:
    """A timeline's epoch and worker columns, equal lengths: few epochs and
    workers so that epochs repeat, come back after others, and have more
    than four workers (the HTML lanes name four)."""
    pairs = st.lists(st.tuples(st.integers(0, 3), st.sampled_from("abcdefg")), max_size=80)
    return pairs.map(lambda ps: ([e for e, _ in ps], [w for _, w in ps]))


def takeover_workflow(
    key: str = "tenant-7/nightly-export", *, n_events: int = 300, takeovers: int = 5
) -> list[dict[str, Any]]:
    """A long, deterministic workflow for the HTML report (not a strategy):
    ``n_events`` events in seq order, ``takeovers`` changes of owner, and after
    each one the displaced owner misbehaving in a different way: stale progress;
    a stale attempt the sink rejects (then verified by the new owner: a cleared
    finding); a stale commit after the new owner's commit of the same effect
    (two findings at one position); a stale attempt with no answer; a
    same-owner retry of a commit. Ordinary progress fills the rest."""
    if takeovers < 1 or n_events < 12 * (takeovers + 1):
        raise ValueError("need at least one takeover and 12 events per owner")
    workers = ["ingest-a", "ingest-b", "ingest-c", "ingest-d", "ingest-e", "ingest-f"]
    out: list[dict[str, Any]] = []

    def emit(type_: str, epoch: int, effect: str | None = None, sink: str | None = None) -> None:
        doc: dict[str, Any] = {
            "type": type_,
            "workflow_key": key,
            "epoch": epoch,
            "worker_id": workers[(epoch - 1) % len(workers)],
            "seq": len(out) + 1,
        }
        if effect is not None:
            doc["effect_key"] = effect
        if sink is not None:
            doc["sink"] = sink
        out.append(doc)

    per_owner = n_events // (takeovers + 1)
    emit("lease_acquired", 1)
    for k in range(1, takeovers + 1):
        old, new = k, k + 1
        while len(out) < k * per_owner - 6:
            emit("progress", old)
        emit("lease_acquired", new)
        effect = f"batch-{k}"
        kind = (k - 1) % 5
        if kind == 0:
            emit("progress", old)
            emit("progress", new)
        elif kind == 1:
            emit("effect_attempted", old, effect, "warehouse")
            emit("effect_rejected", old, effect, "warehouse")
            emit("progress", new)
            emit("outcome_verified", new, effect, "warehouse")
        elif kind == 2:
            emit("effect_committed", new, effect, "ledger")
            emit("effect_attempted", old, effect, "ledger")
            emit("effect_committed", old, effect, "ledger")
        elif kind == 3:
            emit("progress", new)
            emit("effect_attempted", old, effect, "mailer")
        else:
            emit("effect_committed", new, effect, "ledger")
            emit("effect_committed", new, effect, "ledger")
    while len(out) < n_events:
        emit("progress", takeovers + 1)
    return out
