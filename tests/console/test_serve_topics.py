"""``fencewatch serve`` on a mistyped topic: one line and exit 2 at start, as
every other command (it used to wait for good, printing the same line every
2 s)."""

from __future__ import annotations

import uuid

import pytest

from streams.cli import main
from streams.kafka.admin import TopicAdmin
from streams.kafka.connection import KafkaConnection


@pytest.mark.kafka
@pytest.mark.parametrize("flag", ["--findings-topic", "--status-topic", "--events-topic"])
def test_a_named_topic_that_does_not_exist_is_one_line_and_exit_2(
    flag: str, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flag naming a topic not on the broker: one line naming it, status 2, not created."""
    typo = f"fw.findngs-{uuid.uuid4().hex[:8]}"
    argv = ["serve", "--bootstrap-servers", kafka_bootstrap, "--port", "0", flag, typo]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"fencewatch serve: topic {typo} does not exist on {kafka_bootstrap}")
    assert TopicAdmin(KafkaConnection(kafka_bootstrap)).missing([typo]) == [typo]
