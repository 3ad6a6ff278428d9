"""A short nemesis soak on the three-broker cluster, on each engine (issue 42,
item 4): two workers, a steady producer and a seeded schedule of broker and
worker faults for a few minutes; the findings must equal the audit, every
revision once, every worker up, nothing in their logs that no fault explains.
``make soak`` runs the long one (tests/cluster/nemesis.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cluster.conftest import LocalCluster
from tests.cluster.nemesis import Soak, SoakConfig
from tests.faults.test_broker_restart_midstream import topic_factory
from tests.live.conftest import ENGINES, LiveHarness

pytestmark = [pytest.mark.kafka, pytest.mark.faults]

#: The short run's seed; FENCEWATCH_SOAK_SEED replays another.
SEED = int(os.environ.get("FENCEWATCH_SOAK_SEED", "67"))


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("engine", ENGINES)
def test_short_nemesis_soak(kafka_cluster: LocalCluster, tmp_path: Path, engine: str) -> None:
    """Five minutes of seeded faults under a steady producer: findings exact, all alive."""
    kafka_cluster.ensure_all_up()
    config = SoakConfig(seed=SEED, minutes=5.0, engine=engine, workers=2, gap_s=(10.0, 25.0))
    h = LiveHarness(
        kafka_cluster.bootstrap, topic_factory(kafka_cluster.bootstrap), tmp_path, 3, engine
    )
    try:
        soak = Soak(kafka_cluster, h, config)
        report = soak.run()
        soak.write(tmp_path / "soak-report.json")
        print(report.render())
        assert report.faults, report.render()
        assert report.findings > 100, report.render()
        assert report.ok, report.render()
    finally:
        h.close()
        kafka_cluster.ensure_all_up()
