"""A secured broker for the security tests: ``scripts/kafka-local --secure``
(SASL_SSL with SCRAM-SHA-512, a throwaway CA, ACLs), started once per test
module in a temporary state directory and stopped at the end.

Users (docs/kafka-local.md): ``admin`` (super user), ``fencewatch`` (topics
prefixed ``ownership.`` and ``fencewatch``), ``reader`` (only topics
prefixed ``ownership.events``: nothing on the findings topic).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
KAFKA_LOCAL = REPO / "scripts" / "kafka-local"
_START_TIMEOUT_S = 600


@dataclass(frozen=True)
class SecureKafka:
    bootstrap: str
    state_dir: Path

    @property
    def cafile(self) -> str:
        return str(self.state_dir / "secure" / "ca.pem")

    def password(self, user: str) -> str:
        return (self.state_dir / "secure" / f"{user}.password").read_text().strip()

    def env(self, user: str | None, password: str | None = None) -> dict[str, str]:
        """The FENCEWATCH_* variables a fencewatch process needs to connect as
        ``user`` (its real password unless ``password`` is given); ``None``:
        no credentials at all (plain connection to the TLS port)."""
        env = {"FENCEWATCH_BOOTSTRAP_SERVERS": self.bootstrap}
        if user is None:
            return env
        env.update(
            {
                "FENCEWATCH_SECURITY_PROTOCOL": "SASL_SSL",
                "FENCEWATCH_SASL_MECHANISM": "SCRAM-SHA-512",
                "FENCEWATCH_SASL_USERNAME": user,
                "FENCEWATCH_SASL_PASSWORD": password
                if password is not None
                else self.password(user),
                "FENCEWATCH_SSL_CAFILE": self.cafile,
            }
        )
        return env

    def librdkafka(self, user: str) -> dict[str, str]:
        """A confluent-kafka configuration for ``user`` (test-side readers/writers)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": self.password(user),
            "ssl.ca.location": self.cafile,
        }

    def names(self) -> tuple[str, str, str, str]:
        """Fresh (events, findings, dlq, app id) inside the ACLs' prefixes."""
        tag = uuid.uuid4().hex[:10]
        events = f"ownership.events-{tag}"
        return events, f"ownership.findings-{tag}", f"{events}.dlq", f"fencewatch-sec-{tag}"


@pytest.fixture(scope="module")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """A SASL_SSL/SCRAM-SHA-512 broker with ACLs, private to the test module."""
    if shutil.which("java") is None or shutil.which("openssl") is None:
        pytest.fail("the secured broker needs Java 17+ and openssl", pytrace=False)
    state = tmp_path_factory.mktemp("kafka-secure")
    env = dict(os.environ)
    env.update(
        {
            "FENCEWATCH_KAFKA_DIR": str(state),
            "FENCEWATCH_KAFKA_OWNER_PID": str(os.getpid()),
            "FENCEWATCH_PYTHON": sys.executable,
        }
    )
    started = subprocess.run(
        [str(KAFKA_LOCAL), "start", "--secure"],
        env=env,
        capture_output=True,
        text=True,
        timeout=_START_TIMEOUT_S,
        check=False,
    )
    if started.returncode != 0:
        subprocess.run([str(KAFKA_LOCAL), "stop"], env=env, capture_output=True, check=False)
        pytest.fail(
            f"scripts/kafka-local start --secure failed:\n{started.stderr[-3000:]}", pytrace=False
        )
    try:
        yield SecureKafka(started.stdout.strip().splitlines()[-1], state)
    finally:
        subprocess.run(
            [str(KAFKA_LOCAL), "stop"], env=env, capture_output=True, timeout=120, check=False
        )
