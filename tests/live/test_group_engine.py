"""A start refuses a consumer group held by the other engine's workers, in
one line that says what to do, after waiting for members that are leaving
(streams/live/group_engine.py); without a broker, through a stand-in admin."""

from __future__ import annotations

import logging

import pytest

from streams.errors import BrokerError, ConfigError
from streams.kafka.admin import GroupMembers, TopicAdmin
from streams.kafka.connection import KafkaConnection
from streams.live.group_engine import EXTRA_WAIT_S, check_group_engine
from streams.live.settings import LiveSettings


class _Admin:
    """Answers group_members from a script, one answer per call (the last repeats)."""

    def __init__(self, *answers: GroupMembers | BrokerError) -> None:
        self.answers = list(answers)
        self.calls = 0

    def group_members(self, group_id: str) -> GroupMembers:
        assert group_id == "fw-app"
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(answer, BrokerError):
            raise answer
        return answer


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _check(engine: str, admin: _Admin, clock: _Clock | None = None) -> None:
    clock = clock or _Clock()
    settings = LiveSettings(KafkaConnection("h:1"), app_id="fw-app", engine=engine)
    fake: TopicAdmin = admin  # type: ignore[assignment]
    check_group_engine(settings, fake, clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("engine", ["rdkafka", "faust"])
def test_an_empty_group_or_one_of_the_same_engine_is_joined_at_once(engine: str) -> None:
    """No member, or members of this engine's protocol: one look, no wait."""
    ours = {"rdkafka": "range", "faust": "faust"}[engine]
    for found in (GroupMembers(0, ""), GroupMembers(3, ours)):
        admin = _Admin(found)
        clock = _Clock()
        _check(engine, admin, clock)
        assert admin.calls == 1 and clock.now == 100.0


@pytest.mark.parametrize(
    ("engine", "other", "protocol"), [("rdkafka", "faust", "faust"), ("faust", "rdkafka", "range")]
)
def test_a_group_the_other_engine_holds_is_refused_in_one_line_after_the_session_timeout(
    engine: str, other: str, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The other engine's members still there a session timeout (+3 s) later:
    one ConfigError naming the group, both engines and the flag that joins it;
    one warning line while it waits."""
    admin = _Admin(GroupMembers(2, protocol))
    clock = _Clock()
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError) as info:
        _check(engine, admin, clock)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"consumer group fw-app has 2 members running the {other} engine")
    assert f"this worker runs the {engine} engine" in message
    assert f"start this one with --engine {other}" in message
    waited = clock.now - 100.0
    assert LiveSettings(KafkaConnection("h:1")).session_timeout + EXTRA_WAIT_S <= waited < 20
    assert len([r for r in caplog.records if "waiting up to" in r.getMessage()]) == 1


def test_members_that_leave_while_it_waits_let_the_start_go_on() -> None:
    """A killed worker's membership ends at its session timeout: the start
    waits through it and goes on once the group is empty."""
    admin = _Admin(GroupMembers(1, "faust"), GroupMembers(1, "faust"), GroupMembers(0, ""))
    clock = _Clock()
    _check("rdkafka", admin, clock)
    assert admin.calls == 3 and 0 < clock.now - 100.0 < 5


def test_a_rebalancing_group_is_joined_and_left_to_the_broker_to_judge() -> None:
    """While a group rebalances the broker shows no protocol, for as long as
    the rebalance waits on its members (minutes): the start does not take
    that for the other engine; it joins, and a mismatch is refused there."""
    admin = _Admin(GroupMembers(1, "faust"), GroupMembers(2, ""))
    clock = _Clock()
    _check("rdkafka", admin, clock)
    assert admin.calls == 2 and clock.now - 100.0 < 1


def test_a_client_of_neither_engine_is_named_by_its_protocol() -> None:
    """A group held by another client entirely: the message says its
    protocol and asks for another app id, not another engine."""
    with pytest.raises(
        ConfigError, match=r"another client \(group protocol 'roundrobin'\).*another --app-id"
    ):
        _check("rdkafka", _Admin(GroupMembers(1, "roundrobin")))


def test_a_group_that_cannot_be_described_is_not_checked() -> None:
    """No Describe ACL on the group (or no answer): the start goes on as
    before the check; joining is the broker's to refuse."""
    refused = BrokerError(
        "describing consumer group fw-app: denied", code="GROUP_AUTHORIZATION_FAILED"
    )
    admin = _Admin(refused)
    _check("rdkafka", admin)
    assert admin.calls == 1
