"""The compiled core (mypyc, ``scripts/build-native``) is the same code as its
source: the same findings, revisions, invalid records, counters and state
bytes, and never a build older than the source."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streams._native import NATIVE_MODULES, native_status

RUNNER = Path(__file__).with_name("native_runner.py")
TYPES = ("progress", "effect_attempted", "effect_committed", "effect_rejected", "outcome_verified")


def _workflow(rng: random.Random, key: str) -> list[bytes]:
    """One workflow's lines in arrival order: takeovers, stale resumes, retries,
    rejections, epoch reuse and regression, sometimes no seq, redelivered
    copies, late arrivals and invalid lines."""
    with_seq = rng.random() < 0.8
    epoch, owner = rng.randint(1, 5), "w0"
    owners = {epoch: owner}
    out: list[dict[str, Any]] = []

    def emit(kind: str, ep: int, worker: str) -> None:
        n = len(out) + 1
        doc: dict[str, Any] = {
            "type": kind,
            "workflow_key": key,
            "epoch": ep,
            "worker_id": worker,
            "event_id": f"{key}-{n}",
        }
        if with_seq:
            doc["seq"] = n
        if kind.startswith("effect") or kind == "outcome_verified":
            doc["effect_key"] = f"fx-{rng.randint(0, 2)}"
            doc["sink"] = "bucket"
        out.append(doc)

    emit("lease_acquired", epoch, owner)
    for _ in range(rng.randint(2, 40)):
        r = rng.random()
        if r < 0.12:
            epoch += 1
            owner = f"w{rng.randint(0, 3)}"
            owners[epoch] = owner
            emit("lease_acquired", epoch, owner)
        elif r < 0.2 and len(owners) > 1:
            old = rng.choice(sorted(owners)[:-1])
            emit(rng.choice(TYPES), old, owners[old])  # a displaced owner resumes
        elif r < 0.22:
            emit("lease_acquired", epoch, f"w{rng.randint(4, 5)}")  # reuse
        elif r < 0.23:
            emit("lease_acquired", max(0, epoch - 1), "w9")  # regression
        elif r < 0.26:
            emit("lease_released", epoch, owner)
        else:
            emit(rng.choice(TYPES), epoch, owner)
    lines = [json.dumps(d).encode() for d in out]
    for _ in range(rng.randint(0, 3)):  # late arrival: move an event later
        i = rng.randrange(len(lines))
        lines.insert(rng.randint(i, len(lines)), lines.pop(i))
    for _ in range(rng.randint(0, 2)):  # exact redelivery
        lines.insert(rng.randint(0, len(lines)), rng.choice(lines))
    if rng.random() < 0.1:
        lines.insert(rng.randint(0, len(lines)), b'{"type": "progress", "epoch": "x"')
    if rng.random() < 0.1:
        bad = {"type": "effect_committed", "workflow_key": key, "epoch": 1, "worker_id": "z"}
        lines.insert(rng.randint(0, len(lines)), json.dumps(bad).encode())
    return lines


def _messy_corpus(rng: random.Random, workflows: int) -> list[bytes]:
    """Many workflows' lines, interleaved across keys."""
    streams = [_workflow(rng, f"wf-{w}") for w in range(workflows)]
    merged: list[bytes] = []
    while streams:
        i = rng.randrange(len(streams))
        merged.append(streams[i].pop(0))
        if not streams[i]:
            streams.pop(i)
    return merged


def _run(corpus: Path, max_events: int, *, source: bool) -> dict[str, Any]:
    cmd = [sys.executable, str(RUNNER), str(corpus), str(max_events)]
    if source:
        cmd.append("--source")
    done = subprocess.run(cmd, capture_output=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("max_events", [16, 1024])
def test_compiled_and_interpreted_core_decide_the_same(tmp_path: Path, max_events: int) -> None:
    """On a messy corpus the compiled modules and their interpreted sources give the
    same revisions, latest findings, invalid records, summary, state bytes, health
    view, destinations and status records, and the live batch logic the same
    outputs, stored values, status documents and stale-effect counts."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"\n".join(_messy_corpus(random.Random(max_events), 400)) + b"\n")
    source = _run(corpus, max_events, source=True)
    loaded = _run(corpus, max_events, source=False)
    assert all(f.endswith(".py") for f in source["modules"].values())
    if set(native_status().values()) != {"compiled"}:
        pytest.skip(f"the core is not compiled here ({native_status()}): nothing to compare")
    # The other side really is the compiled build (extension modules), not the sources twice.
    assert all(f.endswith(".so") for f in loaded["modules"].values()), loaded["modules"]
    assert source["summary"]["findings"] > 50 and source["summary"]["invalid"] > 0
    if max_events == 16:
        assert source["summary"]["evidence_evicted"] > 0
    assert any(h["status"] == "cleared" for h in source["health"])
    assert any('"stale_epochs":[{' in st for st in source["status"].values())
    batch = source["batch"]
    assert batch["status"] and batch["effects"] and batch["store"]
    assert any(len(o) == 4 for o in batch["outputs"]) and any(len(o) == 2 for o in batch["outputs"])
    parts = ("revisions", "latest", "invalid", "summary", "states")
    for part in (*parts, "health", "destinations", "status", "batch"):
        assert loaded[part] == source[part], part


def test_no_compiled_module_is_older_than_its_source() -> None:
    """Every core module runs compiled from its current source, or interpreted; never
    stale. Under FENCEWATCH_NATIVE=required (CI) every one of them is compiled."""
    status = native_status()
    assert set(status) == set(NATIVE_MODULES)
    assert "stale" not in status.values(), status
    if os.environ.get("FENCEWATCH_NATIVE") == "required":
        assert set(status.values()) == {"compiled"}, status
