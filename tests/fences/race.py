"""The takeover race harness shared by the fenced sink and the staged-promotion
sink: owners (threads, or separate processes) take one workflow key from each
other again and again; each writes while current and once more after it has
been displaced (that last write *prepared* while current — staged, for the
staged sink — and *committed* after). Every commit records the highest epoch
the destination was fenced against when it started (``seen_max``: the lease
store's current epoch, or for a separate destination the epoch the new owner
advanced it to), so a commit whose epoch is below it was certainly made by a
displaced owner.

Run as a script it is one process owner: ``python race.py '<json args>'``
prints its attempts as JSON.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from streams.errors import LeaseHeld
from streams.fences import FencedSink, SqlLeaseStore, open_database
from streams.fences.db import Database
from streams.fences.sink import AppliedEffect
from streams.fences.staged import StagedSink

KINDS = ("fenced-consult", "fenced-advance", "staged")


@dataclass(frozen=True)
class Attempt:
    owner: str
    epoch: int
    seen_max: int
    status: str  # committed | duplicate | rejected
    idempotency_key: str
    effect_key: str
    late: bool


class Writer(Protocol):
    def fenced_epoch(self, key: str) -> int:
        """The highest epoch the destination is fenced against right now."""
        ...

    def on_acquire(self, key: str, epoch: int) -> None: ...
    def prepare(self, key: str, epoch: int, effect_key: str) -> None: ...
    def commit(self, key: str, epoch: int, effect_key: str) -> str: ...
    def visible(self, key: str) -> list[AppliedEffect]: ...


class _Fenced:
    def __init__(self, db: Database, prefix: str, consult: bool) -> None:
        # Without consulting the lease table, the destination lives apart
        # (another prefix) and new owners fence it with advance().
        self.consult = consult
        self.sink = FencedSink(
            db, prefix=prefix if consult else prefix + "d_", consult_leases=consult
        )

        self.leases = SqlLeaseStore(db, prefix=prefix)

    def fenced_epoch(self, key: str) -> int:
        # A separate destination is fenced only once the new owner advanced it
        # (advance never lowers, so advancing to 0 reads the stored epoch).
        return self.leases.current_epoch(key) if self.consult else self.sink.advance(key, 0)

    def on_acquire(self, key: str, epoch: int) -> None:
        if not self.consult:
            self.sink.advance(key, epoch)

    def prepare(self, key: str, epoch: int, effect_key: str) -> None:
        pass

    def commit(self, key: str, epoch: int, effect_key: str) -> str:
        return self.sink.apply(key, epoch, effect_key, str(epoch).encode()).status

    def visible(self, key: str) -> list[AppliedEffect]:
        return self.sink.effects(key)


class _Staged:
    def __init__(self, db: Database, prefix: str) -> None:
        self.sink = StagedSink(db, prefix=prefix)
        self.leases = SqlLeaseStore(db, prefix=prefix)

    def fenced_epoch(self, key: str) -> int:
        return self.leases.current_epoch(key)

    def on_acquire(self, key: str, epoch: int) -> None:
        pass

    def prepare(self, key: str, epoch: int, effect_key: str) -> None:
        self.sink.stage(key, epoch, effect_key, str(epoch).encode())

    def commit(self, key: str, epoch: int, effect_key: str) -> str:
        promotion = self.sink.promote(key, epoch)
        statuses = {r.idempotency_key: r.status for r in promotion.receipts}
        # Staged and promoted by this owner in one go, unless already promoted.
        return statuses.get(effect_key, "rejected" if promotion.status == "rejected" else "gone")

    def visible(self, key: str) -> list[AppliedEffect]:
        return self.sink.visible(key)


def make_writer(kind: str, db: Database, prefix: str) -> Writer:
    if kind == "staged":
        return _Staged(db, prefix)
    return _Fenced(db, prefix, consult=kind == "fenced-consult")


def run_owner(args: dict[str, Any]) -> list[Attempt]:
    """One owner: ``rounds`` acquisitions of ``key``, ``writes`` writes each,
    then the late write after someone else took over."""
    db = open_database(args["url"])
    key, me, owners = args["key"], args["owner"], args["owners"]
    done_dir = Path(args["done_dir"])
    leases = SqlLeaseStore(db, prefix=args["prefix"])
    writer = make_writer(args["kind"], db, args["prefix"])
    out: list[Attempt] = []

    def write(epoch: int, effect_key: str, late: bool, prepared: bool = False) -> None:
        if not prepared:
            writer.prepare(key, epoch, effect_key)
        seen = writer.fenced_epoch(key)
        status = writer.commit(key, epoch, effect_key)
        out.append(Attempt(me, epoch, seen, status, effect_key, effect_key, late))

    try:
        for _ in range(args["rounds"]):
            while True:
                try:
                    lease = leases.acquire(key, me, ttl=0.001)
                    break
                except LeaseHeld:
                    continue
            writer.on_acquire(key, lease.epoch)
            for j in range(args["writes"]):
                # Shared effect keys contend (duplicates); own keys do not.
                write(lease.epoch, f"shared-{j}" if j % 2 else f"e{lease.epoch}-{j}", False)
            late = f"late-{lease.epoch}"
            writer.prepare(key, lease.epoch, late)  # while (probably) still current
            deadline = time.monotonic() + 5.0
            while (
                leases.current_epoch(key) <= lease.epoch
                and len(os.listdir(done_dir)) < owners - 1
                and time.monotonic() < deadline
            ):
                time.sleep(0.002)
            write(lease.epoch, late, True, prepared=True)
    finally:
        (done_dir / me).touch()
        db.close()
    return out


def hammer(
    url: str, prefix: str, kind: str, *, threads: int, processes: int, rounds: int, writes: int = 4
) -> tuple[list[Attempt], list[AppliedEffect]]:
    """Run the owners; return every attempt and the destination's visible rows."""
    key = f"tenant/race/{uuid.uuid4().hex[:8]}"
    setup = open_database(url)
    SqlLeaseStore(setup, prefix=prefix)
    make_writer(kind, setup, prefix)  # tables exist before anyone races
    owners = threads + processes
    attempts: list[Attempt] = []
    errors: list[BaseException] = []
    with tempfile.TemporaryDirectory() as done_dir:
        base = {
            "url": url,
            "prefix": prefix,
            "key": key,
            "kind": kind,
            "owners": owners,
            "done_dir": done_dir,
            "rounds": rounds,
            "writes": writes,
        }
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, json.dumps({**base, "owner": f"p{i}"})],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            )
            for i in range(processes)
        ]
        lock = threading.Lock()

        def thread_owner(i: int) -> None:
            try:
                got = run_owner({**base, "owner": f"t{i}"})
                with lock:
                    attempts.extend(got)
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=thread_owner, args=(i,)) for i in range(threads)]
        for t in workers:
            t.start()
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err[-3000:]
            attempts.extend(Attempt(**a) for a in json.loads(out))
        for t in workers:
            t.join(240)
    assert not errors, errors
    rows = make_writer(kind, setup, prefix).visible(key)
    setup.close()
    return attempts, rows


def check(attempts: list[Attempt], rows: list[AppliedEffect]) -> None:
    """No effect visible from a displaced epoch, none twice, one winner per
    shared effect, epochs never going down in the destination's commit order."""
    committed = [a for a in attempts if a.status == "committed"]
    displaced = [a for a in attempts if a.epoch < a.seen_max]
    # The harness really produced late writers, and every one was refused.
    assert len(displaced) >= 6, len(displaced)
    assert all(a.status == "rejected" for a in displaced), [
        a for a in displaced if a.status != "rejected"
    ]
    # The destination holds exactly the committed attempts, each once.
    assert len({r.idempotency_key for r in rows}) == len(rows)
    assert sorted((r.idempotency_key, r.epoch) for r in rows) == sorted(
        (a.idempotency_key, a.epoch) for a in committed
    )
    assert all(x.epoch <= y.epoch for x, y in itertools.pairwise(rows))
    for j in (1, 3):
        wins = [a for a in committed if a.effect_key == f"shared-{j}"]
        assert len(wins) == 1, wins


if __name__ == "__main__":
    print(json.dumps([asdict(a) for a in run_owner(json.loads(sys.argv[1]))]))
