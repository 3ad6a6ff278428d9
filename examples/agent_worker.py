#!/usr/bin/env python3
"""A minimal agent worker: acquire a lease, checkpoint, apply one effect
through a fenced (or, for contrast, unfenced) sink, release.

    FENCEWATCH_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/agent_worker.py \
        --key tenant/agent-worker/2026-07-26 --worker alpha [--db .run/agent.db] \
        --effect release-index [--steps 3] [--step-seconds 1] [--ttl 5] [--unfenced]
        [--tool-seconds 5] [--topic ownership.events] [--json]

Run two of them against the same --db (the lease store and the sink share
it; the default .run/agent.db has its directory made, a path you give must
be in an existing one): the second waits for the lease, takes over at the next epoch, and the
first one's late effect — if it was paused past its TTL (kill -STOP / -CONT)
— is refused by the fenced sink. Every step is reported to `ownership.events`
(`--topic` to change), where `fencewatch` classifies it. Exit status: 0 when
the effect is in place, 3 when the sink refused it as stale, 2 on errors.

The worker itself — how it uses the SDK's OwnershipReporter, the lease store
and the sink — is `streams/demo/worker.py`; this script is the same as
`fencewatch demo worker`, which `fencewatch demo split-brain` runs twice.
"""

from __future__ import annotations

import sys

from streams.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", "worker", *sys.argv[1:]]))
