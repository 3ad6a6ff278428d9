"""The follower's CPU per finding: ``fencewatch findings --follow --webhook``
draining a backlog of findings to a webhook receiver.

``bench/findings_webhook.py`` measures the whole alert path at a paced rate,
where the follower shares two cores with the worker, the load generator and
the receiver; this one isolates the follower: a topic already holding ``--n``
distinct findings (one revision each, keyed by workflow key, as the processor
writes them), one follower subprocess (``--group``, ``--format jsonl`` to
/dev/null, as in the latency bench) and the latency bench's receiver in a
process of its own. The follower's CPU seconds (user + system, from /proc) are
taken between the ``--warm``-th post received (connections open, imports
done) and the last, divided by the findings posted in between.

The limit, measured in the same run on the same records: a bare
confluent-kafka consumer (``consume()`` batches of 500) that only
``orjson.loads`` each value, in a process of its own: what reading and
decoding alone cost. Issue 24's target for the follower is <= ~50 us per
finding (it was ~190 us).

``--baseline REF``: the follower of an older build as well, in each run, on
the same topic (a group of its own), the order alternating between runs:
REF's ``streams/`` is extracted (``git archive``) into a temporary directory
and run from there. Issue 43's target: the follower within 2x of the one
before it (``ea65604``, the hand-written HTTP client, pipelined), judged by
the median of the per-run ratios. ``--hook-args``: extra follower flags for
the build measured (``--hook-lanes 1 --hook-pipeline 32``).

    .venv/bin/python bench/findings_follow_cpu.py [--n 20000] [--runs 3] [--baseline ea65604]
"""
# make-bench: --n 20000 --runs 3 --baseline ea65604

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from findings_webhook import _cpu_s, _receive
from live_support import REPO, bootstrap, create_topics, produce_one, producer
from results import Figure, add_json_arg, emit


def _findings(n: int) -> list[tuple[bytes, bytes]]:
    """``n`` distinct findings (key, value): the reference fixture's first
    finding with its id and workflow key replaced."""
    import msgspec

    from streams.core.replay import Replay

    r = Replay()
    base = None
    for i, line in enumerate((REPO / "examples" / "reference.jsonl").read_bytes().splitlines()):
        if line.strip():
            found = r.feed(line, offset=i + 1, source="fixture")
            if found:
                base = found[0]
                break
    assert base is not None
    out = []
    for i in range(n):
        f = msgspec.structs.replace(
            base, finding_id=f"cpu-{i:07d}", revision=1, workflow_key=f"hook/{i:07d}"
        )
        out.append((f.workflow_key.encode(), f.to_json()))
    return out


def _bare(conn: Any, bs: str, topic: str, partitions: int, n: int) -> None:
    """The limit's process: read ``n`` records with consume() batches,
    orjson.loads each; sends its CPU seconds for the read."""
    import orjson
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"bare-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    # The first record (metadata, connections, first fetch) is not measured.
    got = 0
    while got == 0:
        got = sum(1 for m in c.consume(1, 1.0) if m.error() is None)
    t0 = time.process_time()
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        for m in c.consume(500, 1.0):
            if m.error() is None:
                orjson.loads(m.value())
                got += 1
    cpu = time.process_time() - t0
    c.close()
    conn.send((cpu, got - 1))


def _follow(
    bs: str, args: argparse.Namespace, topic: str, n: int, tree: Path, extra: list[str]
) -> dict[str, float]:
    """One follower (run from ``tree``) draining ``topic`` to a fresh
    receiver: its CPU µs per finding over the measured window."""
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    receiver = ctx.Process(target=_receive, args=(there, args.warm, n - args.warm), daemon=True)
    receiver.start()
    url = here.recv()
    env = dict(os.environ)
    if tree != REPO:
        # An older tree runs interpreted: its compiled modules are not built.
        env.pop("FENCEWATCH_NATIVE", None)
    with tempfile.TemporaryDirectory() as tmp:
        follower = subprocess.Popen(
            [sys.executable, "-m", "streams", "findings", "--bootstrap-servers", bs,
             "--topic", topic, "--follow", "--format", "jsonl",
             "--group", f"{topic}-hook-{uuid.uuid4().hex[:6]}",
             "--webhook", url, "--dead-letter", str(Path(tmp) / "dead.jsonl"), *extra],
            cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            if not here.poll(120) or here.recv() != "warm":
                raise RuntimeError("the first posts did not arrive within 120 s")
            cpu0, t0 = _cpu_s(follower.pid), time.monotonic()
            rcv0 = _cpu_s(receiver.pid or 0)
            if not here.poll(300):
                raise RuntimeError("the posts did not all arrive within 300 s")
            cpu1, t1 = _cpu_s(follower.pid), time.monotonic()
            rcv1 = _cpu_s(receiver.pid or 0)
            first, posts = here.recv()
        finally:
            follower.terminate()
            _, err = follower.communicate(timeout=60)
            receiver.join(10)
    measured = n - args.warm
    if len(first) < n:
        raise RuntimeError(f"{len(first)}/{n} findings posted; follower said {err[-500:]!r}")
    return {
        "follower_us": (cpu1 - cpu0) / measured * 1e6,
        "rate": measured / (t1 - t0),
        "receiver_us": (rcv1 - rcv0) / measured * 1e6,
        "repeated": posts - n,
    }


def one_run(
    bs: str,
    args: argparse.Namespace,
    records: list[tuple[bytes, bytes]],
    baseline: Path | None = None,
    index: int = 0,
) -> dict[str, float]:
    topic = f"bench-follow-cpu-{uuid.uuid4().hex[:8]}"
    create_topics(bs, [topic], args.partitions)
    p = producer(bs)
    for key, value in records:
        produce_one(p, topic, value, key)
    p.flush(60)
    n = len(records)
    extra = args.hook_args.split()
    out: dict[str, float] = {}
    if baseline is not None and index % 2 == 1:  # alternate which goes first
        old = _follow(bs, args, topic, n, baseline, [])
    out.update(_follow(bs, args, topic, n, REPO, extra))
    if baseline is not None and index % 2 == 0:
        old = _follow(bs, args, topic, n, baseline, [])
    if baseline is not None:
        out["old_us"] = old["follower_us"]
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    bare = ctx.Process(target=_bare, args=(there, bs, topic, args.partitions, n))
    bare.start()
    bare_cpu, bare_n = here.recv()
    bare.join(10)
    out["bare_us"] = bare_cpu / bare_n * 1e6
    return out


def _extract(ref: str, into: Path) -> Path:
    """``ref``'s ``streams/`` under ``into`` (git archive | tar)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "streams"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000, help="findings on the topic")
    ap.add_argument("--warm", type=int, default=2_000, help="posts before the measured window")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", metavar="REF", help="also measure this commit's follower")
    ap.add_argument("--hook-args", default="", help="extra follower flags (the build measured)")
    add_json_arg(ap)
    args = ap.parse_args()
    bs = bootstrap()
    records = _findings(args.n)
    runs = []
    with tempfile.TemporaryDirectory(prefix="fw-baseline-") as tmp:
        baseline = _extract(args.baseline, Path(tmp)) if args.baseline else None
        for i in range(args.runs):
            r = one_run(bs, args, records, baseline, i)
            runs.append(r)
            old = (
                f"; {args.baseline} {r['old_us']:.1f} us/finding "
                f"(x{r['follower_us'] / r['old_us']:.2f})"
                if baseline is not None
                else ""
            )
            print(
                f"run {i + 1}: follower {r['follower_us']:.1f} CPU us/finding{old}, bare "
                f"consume+loads {r['bare_us']:.1f} us/record (ratio "
                f"{r['follower_us'] / r['bare_us']:.1f}); {r['rate']:,.0f} findings/s posted; "
                f"receiver {r['receiver_us']:.1f} us/post; {r['repeated']} repeated posts",
                flush=True,
            )
    setting = (
        f"{args.n:,} findings on {args.partitions} partitions, the first {args.warm:,} posts "
        f"not measured; median of {args.runs} runs (fresh topic, follower and receiver each); "
        f"{os.cpu_count()} CPUs"
    )
    if args.hook_args:
        setting += f"; follower flags {args.hook_args}"
    print(setting)
    figures = []
    if args.baseline:
        figures.append(
            Figure(
                "findings follower CPU per finding against the old client (webhook)",
                statistics.median(r["follower_us"] for r in runs),
                "us",
                f"the follower of {args.baseline} (hand-written HTTP client), same runs",
                statistics.median(r["old_us"] for r in runs),
                "ratio <= 2",
                setting,
                runs=[r["follower_us"] for r in runs],
                limit_runs=[r["old_us"] for r in runs],
                paired_ratio=statistics.median(r["follower_us"] / r["old_us"] for r in runs),
            )
        )
    figures.append(
        Figure(
            "findings follower CPU per finding (webhook)",
            statistics.median(r["follower_us"] for r in runs),
            "us",
            "bare consume() + orjson.loads per record, same run",
            statistics.median(r["bare_us"] for r in runs),
            "value <= 50",
            setting,
            runs=[r["follower_us"] for r in runs],
            limit_runs=[r["bare_us"] for r in runs],
        )
    )
    emit(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
