"""Fixtures for the container tests (``make test-containers``): a Docker
engine that answers and the fencewatch image built from the Dockerfile.

These tests are collected only with FENCEWATCH_TEST_CONTAINERS=1 (see
tests/conftest.py); ``make test-containers`` sets it after
``scripts/docker-local ensure`` has made the engine, Compose and the base
images available. Without an engine they fail, never skip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "fencewatch:local"  # the tag docker-compose.yml gives the built image
_BUILD_TIMEOUT_S = 1200


def docker(
    *args: str, timeout: float = 300, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    """``docker ARGS`` from the checkout, output captured (never raises on a non-zero exit)."""
    cli = shutil.which("docker")
    if cli is None:
        pytest.fail("no docker command: scripts/docker-local ensure", pytrace=False)
    if stdin is not None:
        done = subprocess.run(
            [cli, *args], cwd=ROOT, input=stdin, capture_output=True, timeout=timeout, check=False
        )
        return subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
        )
    return subprocess.run(
        [cli, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def docker_engine() -> str:
    """The engine's version; the session's tests fail with why when none answers."""
    done = docker("version", "--format", "{{.Server.Version}}", timeout=30)
    if done.returncode != 0:
        pytest.fail(
            f"no Docker engine answers ({done.stderr.strip()[-300:]}): scripts/docker-local ensure",
            pytrace=False,
        )
    return done.stdout.strip()


@pytest.fixture(scope="session")
def fencewatch_image(docker_engine: str) -> str:
    """fencewatch:local built from the Dockerfile for this session (cached layers reused)."""
    done = docker("build", "-t", IMAGE, ".", timeout=_BUILD_TIMEOUT_S)
    assert done.returncode == 0, f"docker build failed:\n{(done.stdout + done.stderr)[-4000:]}"
    return IMAGE
