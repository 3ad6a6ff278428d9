"""`fencewatch verify` through a live worker: a person's verification clears a
finding only together with the fence (SPEC §4), never alone; the live status
topic (`fencewatch status`) says the same as the audit's health view."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streams.cli import main
from tests.live.conftest import LiveHarness, fixture_events

EFFECT = "release index for 2026-07-26"


@pytest.fixture
def harness(
    kafka_bootstrap: str, unique_topic: Callable[..., str], tmp_path: Path
) -> Iterator[LiveHarness]:
    h = LiveHarness(kafka_bootstrap, unique_topic, tmp_path, partitions=1)
    yield h
    h.close()


def _health(h: LiveHarness, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """kind -> health status of export-ledger's findings, from `audit --topic`."""
    capsys.readouterr()
    rc = main(
        ["audit", "--topic", h.events, "--bootstrap-servers", h.bootstrap, "--format", "json",
         "--fail-on", "never"]
    )  # fmt: skip
    assert rc == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    kinds = {f["finding_id"]: f["kind"] for f in doc["findings"]}
    return {kinds[x["finding_id"]]: x["status"] for x in doc["health"]}


def _status(h: LiveHarness, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """kind -> open/cleared for export-ledger, from `fencewatch status` on the live topic."""
    capsys.readouterr()
    rc = main(
        ["status", "--bootstrap-servers", h.bootstrap, "--topic", h.status,
         "--workflow", "export-ledger", "--format", "json"]
    )  # fmt: skip
    assert rc == 0
    (doc,) = json.loads(capsys.readouterr().out)["workflows"]
    out = {ref["kind"]: "open" for ref in doc["open"]}
    out.update({ref["kind"]: "cleared" for ref in doc["cleared"]})
    return out


def _verify(h: LiveHarness, effect: str, capsys: pytest.CaptureFixture[str], *extra: str) -> None:
    # No --epoch: verify reads the current epoch (18) from the live status topic.
    rc = main(
        ["verify", "--bootstrap-servers", h.bootstrap, "--events-topic", h.events,
         "--status-topic", h.status, "--workflow", "export-ledger", "--effect", effect,
         "--by", "alice", *extra]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and "by person:alice" in out
    h.wait_all_committed()


def test_verify_clears_only_what_is_fenced_and_verified(
    harness: LiveHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fence alone: open; another effect clears only stale_activity; the right one the rest."""
    h = harness
    worker = h.start()
    worker.wait_ready()
    h.produce(fixture_events())
    h.wait_all_committed()
    assert set(_health(h, capsys).values()) == {"open"}
    assert _status(h, capsys) == _health(h, capsys)
    assert main(["status", "--bootstrap-servers", h.bootstrap, "--topic", h.status]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("critical   export-ledger  epoch 18 (beta)  open 4 (")
    assert "stale 17x" in first

    # The fence's receipt: the destination refuses the displaced owner (epoch 17).
    fence = {
        "type": "effect_rejected", "workflow_key": "export-ledger", "epoch": 17,
        "worker_id": "alpha", "seq": 10, "effect_key": EFFECT, "sink": "release-bucket",
    }  # fmt: skip
    h.produce([(b"export-ledger", json.dumps(fence).encode())])
    h.wait_all_committed()
    assert set(_health(h, capsys).values()) == {"open"}, "fenced but not verified: open"
    assert _status(h, capsys) == _health(h, capsys)

    # An effect the workflow never had: refused unless --force (the person means it).
    _verify(h, "some other effect", capsys, "--force")
    verified = json.loads(h.read(h.events)[-1].value or b"")
    assert verified["type"] == "outcome_verified"
    assert (verified["worker_id"], verified["epoch"]) == ("person:alice", 18)
    assert verified["attrs"]["verified_by"] == "alice"
    partly = _health(h, capsys)
    assert _status(h, capsys) == partly  # the live status view agrees with the audit's
    # A finding without an effect key is verified by any verification (SPEC §4 health view).
    assert partly.pop("stale_activity") == "cleared"
    assert set(partly.values()) == {"open"}

    _verify(h, EFFECT, capsys)
    assert set(_health(h, capsys).values()) == {"cleared"}
    assert _status(h, capsys) == _health(h, capsys)
    health = worker.health()
    assert health is not None and health["processed"] == len(fixture_events()) + 3


def test_verify_without_status_or_epoch_is_a_one_line_error(
    kafka_bootstrap: str, unique_topic: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No record for the workflow on the status topic and no --epoch: exit 2 asking for --epoch."""
    status = unique_topic(1, prefix="status", config={"cleanup.policy": "compact"})
    rc = main(
        ["verify", "--bootstrap-servers", kafka_bootstrap, "--status-topic", status,
         "--workflow", "nope", "--effect", "e", "--by", "bob"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "give --epoch N" in err and err.count("\n") == 1
