"""The lease store (a real PostgreSQL server, private to this test) stopped and
started again under an SDK workload of several owners: irreversible effects
fail closed while it is down, deferred ones are applied exactly once or
rejected as stale after it returns, nothing is lost or doubled."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from streams.core.records import Event, EventType
from streams.core.validate import parse_event
from streams.errors import EffectRefused, LeaseLost, StoreUnavailable
from streams.fences import Database, FencedSink, SqlLeaseStore, open_database
from streams.kafka.connection import KafkaConnection
from streams.sdk import EffectOutcome, OwnershipReporter, ReporterSettings, Risk

PG_LOCAL = Path(__file__).resolve().parents[2] / "scripts" / "postgres-local"
OWNERS = 6
TTL = 2.0
OUTAGE_S = 3.0  # longer than the TTL: every lease is lost while the store is down


class PrivatePostgres:
    """``scripts/postgres-local`` in its own directory (never the shared server):
    the test may stop and start it; the DSN survives a restart."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.env = {**os.environ, "FENCEWATCH_PG_DIR": str(run_dir)}
        self.dsn = ""
        self._hba: str | None = None

    def _run(self, cmd: str) -> str:
        done = subprocess.run(
            [str(PG_LOCAL), cmd], env=self.env, capture_output=True, text=True, timeout=600
        )
        if done.returncode != 0:
            raise AssertionError(f"postgres-local {cmd} failed: {done.stderr[-3000:]}")
        return done.stdout.strip()

    def start(self) -> str:
        dsn = self._run("start").splitlines()[-1]
        if self.dsn and dsn != self.dsn:
            raise AssertionError(f"PostgreSQL came back at {dsn}, not {self.dsn}")
        self.dsn = dsn
        return dsn

    def stop(self) -> None:
        self._run("stop")

    @property
    def socket_dsn(self) -> str:
        """The same server through its unix socket (pg_hba's ``local`` lines)."""
        port = urlsplit(self.dsn).port
        return f"postgresql://postgres@/fencewatch?host={self.run_dir / 'sock'}&port={port}"

    def refuse_tcp(self) -> None:
        """While stopped: from the next start the server refuses every TCP
        connection (pg_hba ``reject``) and admits its unix socket only."""
        hba = self.run_dir / "data" / "pg_hba.conf"
        self._hba = hba.read_text()
        hba.write_text("local all all trust\nhost all all all reject\n")

    def admit_tcp(self, db: Database) -> None:
        """Undo :meth:`refuse_tcp` on the running server (``db``: a superuser
        session through the socket); TCP connections opened from now on get in."""
        assert self._hba is not None
        (self.run_dir / "data" / "pg_hba.conf").write_text(self._hba)
        with db.transaction() as tx:
            assert tx.query("SELECT pg_reload_conf()") == [(True,)]


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A private server. Its directory is not under pytest's basetemp: pytest
    resets /tmp/pytest-of-<user> to mode 0700 whenever any run starts, and as
    root the server runs as `postgres`, which must reach its directory."""
    run_dir = Path(tempfile.mkdtemp(prefix="fencewatch-pg-outage-"))
    pg = PrivatePostgres(run_dir)
    try:
        pg.start()
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


@dataclass
class Call:
    effect_key: str
    risk: str
    outcome: EffectOutcome | None = None
    refused: EffectRefused | None = None
    # Attempted as the server went away: no receipt, the outcome is unknown.
    unknown: StoreUnavailable | None = None


@dataclass
class WorkerLog:
    worker: str
    key: str
    epoch: int = 0
    calls: list[Call] = field(default_factory=list)
    lost_reason: str | None = None
    errors: list[BaseException] = field(default_factory=list)


def _read(bootstrap: str, topic: str) -> list[Event]:
    from streams.kafka.reader import iter_topic

    return [
        parse_event(v, key=k) for k, v, _p, _o in iter_topic(KafkaConnection(bootstrap), topic) if v
    ]


@pytest.mark.faults
@pytest.mark.postgres
def test_lease_store_outage_under_an_sdk_workload(
    private_pg: PrivatePostgres, kafka_bootstrap: str, unique_topic: Callable[..., str]
) -> None:
    """Six owners alternate irreversible and deferrable effects while PostgreSQL
    is stopped for longer than their TTL and started again: every irreversible
    call during the outage is refused with evidence and never applied; every
    deferred effect ends committed once or rejected as stale (all of those
    still queued when another worker took their key over, none of the others);
    the table holds exactly the committed effects, once each."""
    topic = unique_topic(partitions=1)
    prefix = f"o{uuid.uuid4().hex[:8]}_"
    url = private_pg.dsn
    setup = open_database(url, timeout_s=1.0)
    SqlLeaseStore(setup, prefix=prefix)  # tables exist before the clock starts
    setup.close()
    down = threading.Event()
    stop = threading.Event()
    logs = [WorkerLog(f"w{i}", f"tenant/outage/{i}") for i in range(OWNERS)]
    dbs = []

    def work(log: WorkerLog) -> None:
        db = open_database(url, timeout_s=1.0)
        dbs.append(db)
        leases = SqlLeaseStore(db, prefix=prefix)
        sink = FencedSink(db, name="ledger", prefix=prefix)
        settings = ReporterSettings(kafka_bootstrap, log.worker, topic=topic)
        try:
            with (
                OwnershipReporter(settings, leases=leases) as rep,
                rep.own(log.key, ttl=TTL, drain_timeout_s=60) as owner,
            ):
                log.epoch = owner.epoch
                n = 0
                while not stop.is_set():
                    risk: Risk = "irreversible" if n % 2 == 0 else "deferrable"
                    call = Call(f"{log.worker}-{n}", risk)
                    log.calls.append(call)
                    try:
                        call.outcome = owner.effect(sink, call.effect_key, b"x", risk=risk)
                    except EffectRefused as exc:
                        call.refused = exc
                    except StoreUnavailable as exc:
                        call.unknown = exc
                    except LeaseLost:
                        log.calls.pop()
                        log.lost_reason = owner.lost_reason
                        break
                    n += 1
                    time.sleep(0.05)
        except BaseException as exc:
            log.errors.append(exc)

    threads = [threading.Thread(target=work, args=(log,)) for log in logs]
    for t in threads:
        t.start()
    time.sleep(1.5)
    private_pg.stop()
    down.set()
    stopped_at = time.monotonic()
    # When the server comes back, the owners (TCP, as a remote worker) stay
    # refused until the thief (its unix socket) has taken half the keys over:
    # the takeover lands before any owner can drain, whatever the scheduling.
    private_pg.refuse_tcp()
    time.sleep(OUTAGE_S)
    in_outage = {c.effect_key for log in logs for c in log.calls}  # called before the restart
    private_pg.start()
    restarted_after = time.monotonic() - stopped_at
    thief_db = open_database(private_pg.socket_dsn, timeout_s=5.0)
    thief = SqlLeaseStore(thief_db, prefix=prefix)
    # Their leases expired by the store's clock during the outage (OUTAGE_S > TTL).
    taken = {log.key: thief.acquire(log.key, "thief", ttl=60).epoch for log in logs[::2]}
    # Deferred effects still waiting for the store as the keys change hands.
    queued = {
        log.key: [c for c in log.calls if c.outcome and c.outcome.deferred and not c.outcome.done()]
        for log in logs
    }
    private_pg.admit_tcp(thief_db)
    stop.set()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert [e for log in logs for e in log.errors] == []
    assert restarted_after >= OUTAGE_S
    assert all(taken[log.key] > log.epoch for log in logs[::2])
    assert any(queued[key] for key in taken), "no deferred effect was queued at the takeover"
    # Per key, whatever the scheduling: what waited on a taken-over key is
    # rejected as stale, what waited on a key nobody took is applied.
    for log in logs:
        for c in queued[log.key]:
            assert c.outcome is not None
            if log.key in taken:
                assert c.outcome.status == "rejected", (log.key, c.outcome)
            else:
                assert c.outcome.accepted, (log.key, c.outcome)

    sink = FencedSink(thief_db, name="ledger", prefix=prefix)
    calls = [c for log in logs for c in log.calls]
    irreversible = [c for c in calls if c.risk == "irreversible"]
    deferrable = [c for c in calls if c.risk == "deferrable"]
    refused = [c for c in irreversible if c.refused is not None]
    # The harness really exercised both paths.
    assert len(refused) >= OWNERS, "no irreversible effect met the outage"
    assert sum(1 for c in deferrable if c.outcome and c.outcome.deferred) >= OWNERS
    assert all(c.refused.reason == "store_unavailable" for c in refused)  # type: ignore[union-attr]
    assert {c.effect_key for c in refused} <= in_outage
    # Every effect is accounted for: no deferred one left waiting or abandoned.
    for c in calls:
        if c.refused is None and c.unknown is None:
            assert c.outcome is not None and c.outcome.done(), c
            # duplicate: a deferred retry after an attempt that had landed.
            assert c.outcome.status in ("committed", "duplicate", "rejected"), c.outcome
    unknown = {(log.key, c.effect_key) for log in logs for c in log.calls if c.unknown}
    assert all(c.risk == "irreversible" for c in calls if c.unknown)
    rows = {(r.workflow_key, r.effect_key): r for log in logs for r in sink.effects(log.key)}
    in_place = {
        (log.key, c.effect_key)
        for log in logs
        for c in log.calls
        if c.outcome is not None and c.outcome.accepted
    }
    # Exactly the accepted effects are in the table (a refused irreversible
    # effect never is; a stale deferred one never is), each once (primary
    # key); an irreversible one cut off mid-attempt may or may not be.
    assert in_place <= set(rows) <= in_place | unknown
    for c in calls:
        if c.outcome is not None and c.outcome.status == "rejected":
            assert c.outcome.receipt is not None and c.outcome.receipt.reason == "stale_epoch"
    stale_rejected = [c for c in deferrable if c.outcome and c.outcome.status == "rejected"]
    # Both ends of the deferred path ran.
    assert stale_rejected, "no deferred effect met a takeover"
    late_commits = [
        c for c in deferrable if c.outcome and c.outcome.deferred and c.outcome.accepted
    ]
    assert late_commits, "no deferred effect was committed after the restart"
    # Rows of a taken-over key are all from epochs granted before the takeover,
    # committed before it (the fence's order never goes back).
    for log in logs:
        epochs = [r.epoch for r in sink.effects(log.key)]
        assert epochs == sorted(epochs)
        assert set(epochs) <= {log.epoch}
    # The evidence: every refusal says why; every commit is reported once.
    events = _read(kafka_bootstrap, topic)
    by_effect: dict[str, list[Event]] = {}
    for e in events:
        if e.effect_key is not None:
            by_effect.setdefault(e.effect_key, []).append(e)
    for c in refused:
        (ev,) = by_effect[c.effect_key]
        assert ev.type == EventType.EFFECT_REJECTED and ev.seq is None
        assert ev.attrs is not None and ev.attrs["reason"] == "store_unavailable"
    committed = [c for c in calls if c.outcome is not None and c.outcome.status == "committed"]
    for c in committed:
        effect_key = c.effect_key
        kinds = [e.type for e in by_effect[effect_key]]
        assert kinds.count(EventType.EFFECT_COMMITTED) == 1, (effect_key, kinds)
    for c in stale_rejected:
        assert EventType.EFFECT_COMMITTED not in [e.type for e in by_effect[c.effect_key]]
    assert all(log.lost_reason for log in logs), [log.lost_reason for log in logs]
    thief_db.close()
    for db in dbs:
        db.close()
