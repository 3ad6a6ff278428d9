"""The two engines cannot share a consumer group: their group protocols
differ (librdkafka's ``range`` assignor, faust's own ``faust``), and the
broker refuses a member whose protocol the group's members do not offer
(``INCONSISTENT_GROUP_PROTOCOL``). Found when the default engine changed:
a rolling restart of a faust deployment onto rdkafka left the new worker
logging ``JoinGroup failed`` every 2 s without partitions, and a faust worker
started in an rdkafka group logged one aiokafka error and then sat idle for
good. So a start checks the group first and says what to do in one line."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from streams.errors import BrokerError, ConfigError
from streams.kafka.admin import GroupMembers, TopicAdmin
from streams.live.settings import LiveSettings

__all__ = [
    "ENGINE_PROTOCOLS",
    "REFUSED_FOR_PROTOCOL",
    "check_group_engine",
    "mixed_engines_message",
]

#: Each engine's group protocol (its partition assignor's name).
ENGINE_PROTOCOLS = {"rdkafka": "range", "faust": "faust"}
#: The error code (:attr:`~streams.errors.BrokerError.code`, either client's
#: as :mod:`streams.kafka.errors` names it) of a join refused because the
#: group's members offer another protocol.
REFUSED_FOR_PROTOCOL = "INCONSISTENT_GROUP_PROTOCOL"
#: Seconds past the session timeout a start waits for the other engine's
#: members to leave: a worker killed without leaving stays a member until its
#: session times out (SIGTERM leaves at once).
EXTRA_WAIT_S = 3.0

log = logging.getLogger(__name__)


def _engine_of(protocol: str) -> str | None:
    return next((e for e, p in ENGINE_PROTOCOLS.items() if p == protocol), None)


def mixed_engines_message(settings: LiveSettings, found: GroupMembers | None) -> str:
    """One line: the group holds workers this engine cannot join, and what to do."""
    if found is None:
        # A join refused later: the group's protocol is not known here, and
        # the other engine is by far the likeliest holder.
        other: str | None = next(e for e in ENGINE_PROTOCOLS if e != settings.engine)
        who = f"members of another group protocol (the {other} engine's, or another client's)"
    else:
        other = _engine_of(found.protocol)
        who = (
            f"{found.members} member{'s' if found.members != 1 else ''} running "
            + (f"the {other} engine" if other else "another client")
            + f" (group protocol {found.protocol!r})"
        )
    fix = f"--engine {other}" if other else f"another --app-id than {settings.app_id}"
    return (
        f"consumer group {settings.app_id} has {who}, and this worker runs the "
        f"{settings.engine} engine: the engines cannot share a group. Stop those workers "
        f"first, or start this one with {fix} (docs/live.md, 'Which to pick')"
    )


def check_group_engine(
    settings: LiveSettings,
    admin: TopicAdmin,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Return once consumer group ``settings.app_id`` has no member of
    another protocol than this engine's, waiting up to the session timeout
    (plus :data:`EXTRA_WAIT_S`) for such members to leave; then raise
    :class:`~streams.errors.ConfigError` with :func:`mixed_engines_message`.
    A group that cannot be described (no Describe ACL on it, a broker that
    does not answer) is not checked: the start goes on, as before the check."""
    ours = ENGINE_PROTOCOLS[settings.engine]
    deadline = clock() + settings.session_timeout + EXTRA_WAIT_S
    told = False
    while True:
        try:
            found = admin.group_members(settings.app_id)
        except BrokerError as exc:
            log.debug("consumer group %s not checked: %s", settings.app_id, exc)
            return
        # An empty protocol: the group is rebalancing, and the broker shows
        # no protocol then (for as long as the rebalance waits on members,
        # up to their rebalance timeout: minutes). Not known to differ, so
        # join: the broker refuses a mismatch, and both engines stop on that
        # refusal with the same line.
        if found.members == 0 or found.protocol in (ours, ""):
            if told:
                log.info("consumer group %s: the other engine's workers left", settings.app_id)
            return
        if clock() >= deadline:
            raise ConfigError(mixed_engines_message(settings, found))
        if not told:
            told = True
            other = _engine_of(found.protocol)
            log.warning(
                "consumer group %s has %d member(s) of %s (group protocol %r) and this "
                "worker runs the %s engine: waiting up to %.0f s for them to leave (a "
                "stopped worker stays a member until its session times out)",
                settings.app_id,
                found.members,
                f"the {other} engine" if other else "another client",
                found.protocol,
                settings.engine,
                max(0.0, deadline - clock()),
            )
        sleep(0.5)
