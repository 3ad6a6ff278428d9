"""Kafka client logs: quiet unless asked for.

librdkafka logs every failed connection attempt (``%3|...|FAIL|...``), at
error level, many times a second. A user of a fencewatch command wants one
line saying what is wrong (the command prints it from the translated
error), so by default these loggers show nothing; ``--log-level debug``
shows everything they say. aiokafka and faust log only inside ``fencewatch
run``'s worker, which starts after the broker was reached and runs at the
worker's ``--log-level`` (info by default: a running service's connection
trouble belongs in its log).
"""

from __future__ import annotations

import logging

__all__ = ["CLIENT_LOGGERS", "configure_client_logs"]

#: The client libraries' loggers (librdkafka's goes through
#: :data:`streams.kafka.connection.LIBRDKAFKA_LOGGER`).
CLIENT_LOGGERS = ("streams.kafka.librdkafka",)
_QUIET = logging.CRITICAL + 1


def configure_client_logs(level: str = "warning") -> None:
    """At ``debug`` the client loggers pass everything on (to the root
    handler, or stderr's last resort); at any other level they are silent.
    Also installs a stderr handler when nothing is configured, so a debug
    run shows the lines."""
    debug = level.lower() == "debug"
    for name in CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else _QUIET)
    if debug and not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.DEBUG, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
