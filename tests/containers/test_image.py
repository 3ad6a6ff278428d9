"""The fencewatch image built from the Dockerfile runs the CLI and audits the
SPEC §5 reference fixture like an installed tool."""

from __future__ import annotations

from importlib.metadata import version

import orjson
import pytest

from streams.demo.expected import REFERENCE_EXPECTED
from tests.containers.conftest import ROOT, docker

# The first test builds the image (pip install inside it): minutes on a fresh machine.
pytestmark = pytest.mark.timeout(1200)


def test_image_reports_the_version_of_this_checkout(fencewatch_image: str) -> None:
    """`fencewatch --version` in the image prints this checkout's version."""
    done = docker("run", "--rm", fencewatch_image, "fencewatch", "--version", timeout=120)
    assert done.returncode == 0, done.stderr
    assert version("fencewatch") in done.stdout


def test_image_audits_the_reference_fixture_to_its_four_findings(fencewatch_image: str) -> None:
    """The fixture piped into `fencewatch audit` in the image: SPEC §5's four findings, exit 1."""
    fixture = (ROOT / "examples" / "reference.jsonl").read_bytes()
    done = docker(
        "run", "--rm", "-i", fencewatch_image, "fencewatch", "audit", "--format", "jsonl", "-",
        stdin=fixture, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    found = {
        (doc["workflow_key"], doc["kind"], doc["event_seq"])
        for doc in map(orjson.loads, done.stdout.splitlines())
    }
    assert found == REFERENCE_EXPECTED


def test_image_runs_as_an_unprivileged_user(fencewatch_image: str) -> None:
    """The image's processes run as the fencewatch user (uid 10001), not root."""
    done = docker("run", "--rm", fencewatch_image, "id", "-u", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "10001"
