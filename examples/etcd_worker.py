#!/usr/bin/env python3
"""An etcd election candidate that reports its work as evidence (needs the
`etcd` extra). `fencewatch source etcd` publishes the election's transitions;
the worker publishes only its progress, each stamped with an etcd revision.

    python examples/etcd_worker.py --endpoints http://127.0.0.1:2379 \
        --election /election/export --worker alpha [--ttl 2] [--steps 50] \
        [--interval 0.2] [--bootstrap-servers HOST:PORT] [--topic ownership.events]

It campaigns as etcd's election recipe does: a key `<election>/<lease id>`
bound to a lease of `--ttl` seconds (kept alive every third of it), its
identity as the value; it leads once its key is the oldest of the election.
Then each step reports `progress` at epoch = its key's create revision, with
`seq` from `EtcdStamps` (one etcd write: a revision after every election
change before it). A worker frozen past its TTL (SIGSTOP) loses its key to
etcd; when it wakes, its next step is reported before it learns that (the
stamp's answer), which is the stale evidence the detector flags; it then
exits 3.

The split brain, by hand (tests/integrations/test_etcd_source.py runs it):

    fencewatch source etcd --endpoints http://127.0.0.1:2379 --prefix /election/ &
    python examples/etcd_worker.py ... --worker alpha &  # leads
    python examples/etcd_worker.py ... --worker beta &   # waits
    kill -STOP %2; sleep 4; kill -CONT %2    # alpha's lease runs out, beta leads;
                                             # alpha wakes, reports, exits 3
    fencewatch audit --topic ownership.events  # stale_activity, confidence high

A SIGTERM resigns: the worker revokes its lease, so its key goes at once and
the next candidate leads without waiting out the TTL.

Each step is printed as a JSON line. Exit status: 0 after `--steps` steps as
leader, 3 when it found itself displaced, 2 on errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import Any

from streams.errors import FencewatchError
from streams.integrations.etcd import EtcdClient, EtcdStamps
from streams.sdk import OwnershipReporter, ReporterSettings


def _step(name: str, **fields: object) -> None:
    print(json.dumps({"step": name, **fields}), flush=True)


def _keep_alive(lease: Any, ttl: int, stop: threading.Event) -> None:
    # Renews every third of the TTL; a frozen process renews nothing, which
    # is how it loses the election.
    while not stop.wait(ttl / 3):
        try:
            lease.refresh()
        except Exception:
            return


def _resign(lease: Any) -> None:
    # Revoking deletes the candidate's key now; a lease etcd already expired
    # (a frozen worker's) has nothing left to give up, so any failure is moot.
    with contextlib.suppress(Exception):
        lease.revoke()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--endpoints", required=True)
    p.add_argument("--election", required=True, help="e.g. /election/export")
    p.add_argument("--worker", required=True)
    p.add_argument("--ttl", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument(
        "--bootstrap-servers", default=os.environ.get("FENCEWATCH_BOOTSTRAP_SERVERS", "")
    )
    p.add_argument("--topic", default="ownership.events")
    args = p.parse_args()
    stop = threading.Event()
    # SIGTERM leaves through the finally below (which resigns), not mid-write.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    lease = None
    try:
        etcd = EtcdClient(args.endpoints)
        stamps = EtcdStamps(etcd)
        lease = etcd.gateway.lease(ttl=args.ttl)
        key = f"{args.election}/{lease.id:x}"
        etcd.gateway.put(key, args.worker, lease=lease)
        threading.Thread(target=_keep_alive, args=(lease, args.ttl, stop), daemon=True).start()
        _rev, kvs, _more = etcd.range_prefix(key.encode())
        epoch = kvs[0].create_revision
        _step("campaigning", key=key, epoch=epoch)
        while not stamps.stamp(args.election, epoch).current:
            time.sleep(0.1)
        _step("leader", epoch=epoch)
        settings = ReporterSettings(args.bootstrap_servers, args.worker, topic=args.topic)
        with OwnershipReporter(settings) as reporter:
            for i in range(args.steps):
                stamp = stamps.stamp(args.election, epoch)
                reporter.emit("progress", args.election, epoch, stamp=stamp, attrs={"step": i})
                reporter.flush()
                _step("progress", i=i, seq=stamp.seq, current=stamp.current)
                if not stamp.current:
                    _step("displaced", epoch=epoch, current_epoch=stamp.current_epoch)
                    return 3
                time.sleep(args.interval)
        _resign(lease)
        lease = None
        _step("done", epoch=epoch)
        return 0
    except FencewatchError as exc:
        print(f"etcd_worker: {exc}", file=sys.stderr)
        return 2
    finally:
        stop.set()
        if lease is not None:
            _resign(lease)


if __name__ == "__main__":
    sys.exit(main())
