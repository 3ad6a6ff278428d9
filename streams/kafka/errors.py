"""The one translation of Kafka client errors into fencewatch's error types.

confluent-kafka raises ``KafkaException(KafkaError)`` and reports delivery
and consume failures as bare ``KafkaError`` values; aiokafka raises
``aiokafka.errors.KafkaError`` subclasses. Everything leaves this layer as a
:class:`~streams.errors.BrokerError`, typed by what a caller can do about it:

=======================  ==================================================
:class:`BrokerUnreachable`  no broker answered (address, network, broker down)
:class:`AuthenticationFailed`  SASL or TLS handshake refused
:class:`AuthorizationFailed`  an ACL forbids the topic, group or transaction
:class:`TopicMissing`      the topic (or partition) does not exist
:class:`ProducerFenced`    a newer producer with the same transactional id
                           took over: the caller is a stale owner
                           (:class:`~streams.errors.StaleOwner` where the
                           caller knows the key and epoch, as the outbox does)
=======================  ==================================================

``code`` keeps the client's error name (``_TRANSPORT``,
``TOPIC_AUTHORIZATION_FAILED`` ...), ``retriable`` the client's verdict.

The classes are defined with the rest of the family in :mod:`streams.errors`
(re-exported here); this module holds the one mapping (:func:`translate`) and
the one place a client call is wrapped (:func:`kafka_errors`)::

    with kafka_errors("creating topics"):
        futures = client.create_topics(...)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from types import TracebackType
from typing import Any

from streams.errors import (
    AuthenticationFailed,
    AuthorizationFailed,
    BrokerError,
    BrokerUnreachable,
    FencewatchError,
    ProducerFenced,
    TopicMissing,
)

__all__ = [
    "AuthenticationFailed",
    "AuthorizationFailed",
    "BrokerUnreachable",
    "ProducerFailed",
    "ProducerFenced",
    "TopicMissing",
    "TransactionFenced",
    "TransactionUnavailable",
    "first_metadata",
    "from_kafka_error",
    "is_fenced",
    "kafka_errors",
    "no_answer",
    "refused_credentials",
    "topic_unavailable",
    "translate",
    "watch_credentials",
]


# The faust engine's transactions (aiokafka's transactional producers, one per
# input partition: streams/live/faust/seam.py and txn.py raise these).


class TransactionUnavailable(FencewatchError):
    """No transactional producer (or none in a transaction) for a partition."""


class TransactionFenced(FencewatchError):
    """The broker refused this worker's transactions for ``partitions``: their
    producer was fenced (another producer took the transactional id, or the
    transaction timed out) or its group generation is stale. Nothing of the
    open transactions can be committed any more (see also :class:`ProducerFailed`)."""

    def __init__(self, partitions: Sequence[int], cause: BaseException) -> None:
        self.partitions = list(partitions)
        self.cause = cause
        super().__init__(f"{type(cause).__name__} for partitions {self.partitions}")


class ProducerFailed(TransactionFenced):
    """The transactional producer of ``partitions`` failed for good without
    being fenced: aiokafka's sender routine stopped on an error it does not
    retry (seen: the broker dies while a transaction commits and the
    coordinator look-up finds the connection closed) and moved the producer
    to its fatal state. As with a fenced one, nothing of its open
    transactions can ever commit and the runtime handles it the same way
    (new producers, rejoin, restore); unlike one, no other worker took the
    partitions, so the log line says what failed instead."""


_UNREACHABLE = frozenset(
    {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_TIMED_OUT", "NETWORK_EXCEPTION"}
)
_AUTHENTICATION = frozenset(
    {"SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION", "_SSL", "ILLEGAL_SASL_STATE",
     "UNSUPPORTED_SASL_MECHANISM"}
)  # fmt: skip
_AUTHORIZATION = frozenset(
    {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
     "CLUSTER_AUTHORIZATION_FAILED", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"}
)  # fmt: skip
_MISSING = frozenset({"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION"})
# librdkafka reports a fenced transactional producer as the fatal _FENCED;
# brokers may answer PRODUCER_FENCED or INVALID_PRODUCER_EPOCH first.
_FENCED = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})
# Other codes that mean "ask again later".
_RETRIABLE = frozenset({"_TRANSPORT", "_TIMED_OUT", "REQUEST_TIMED_OUT", "NOT_CONTROLLER"})

# aiokafka exception class names -> our kinds (matched by name so this module
# does not import aiokafka for callers that never use it).
_AIOKAFKA: dict[str, tuple[type[BrokerError], str]] = {
    "KafkaConnectionError": (BrokerUnreachable, "_TRANSPORT"),
    "NoBrokersAvailable": (BrokerUnreachable, "_ALL_BROKERS_DOWN"),
    "KafkaTimeoutError": (BrokerUnreachable, "_TIMED_OUT"),
    "RequestTimedOutError": (BrokerUnreachable, "REQUEST_TIMED_OUT"),
    "SaslAuthenticationFailed": (AuthenticationFailed, "SASL_AUTHENTICATION_FAILED"),
    "AuthenticationFailedError": (AuthenticationFailed, "SASL_AUTHENTICATION_FAILED"),
    "UnsupportedSaslMechanismError": (AuthenticationFailed, "UNSUPPORTED_SASL_MECHANISM"),
    "ClusterAuthorizationFailedError": (AuthorizationFailed, "CLUSTER_AUTHORIZATION_FAILED"),
    "TopicAuthorizationFailedError": (AuthorizationFailed, "TOPIC_AUTHORIZATION_FAILED"),
    "GroupAuthorizationFailedError": (AuthorizationFailed, "GROUP_AUTHORIZATION_FAILED"),
    "TransactionalIdAuthorizationFailed": (
        AuthorizationFailed,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    ),
    "UnknownTopicOrPartitionError": (TopicMissing, "UNKNOWN_TOPIC_OR_PART"),
    "ProducerFenced": (ProducerFenced, "PRODUCER_FENCED"),
    "InvalidProducerEpoch": (ProducerFenced, "INVALID_PRODUCER_EPOCH"),
    "TransactionCoordinatorFenced": (ProducerFenced, "PRODUCER_FENCED"),
    # A JoinGroup refused: the group's members offer another protocol.
    "InconsistentGroupProtocolError": (BrokerError, "INCONSISTENT_GROUP_PROTOCOL"),
}


def _kind(code: str) -> type[BrokerError]:
    if code in _UNREACHABLE:
        return BrokerUnreachable
    if code in _AUTHENTICATION:
        return AuthenticationFailed
    if code in _AUTHORIZATION:
        return AuthorizationFailed
    if code in _MISSING:
        return TopicMissing
    if code in _FENCED:
        return ProducerFenced
    return BrokerError


def from_kafka_error(err: Any, action: str) -> BrokerError:
    """A confluent-kafka ``KafkaError`` (as delivered to a callback, or found
    on a message) as our typed error; ``action`` says what was being done."""
    code = str(err.name())
    retriable = bool(err.retriable()) or code in _RETRIABLE
    return _kind(code)(f"{action}: {err.str()}", code=code, retriable=retriable)


def translate(exc: BaseException, action: str) -> BrokerError:
    """Any client exception (confluent-kafka, aiokafka, a client future's
    timeout) as our typed error. A :class:`BrokerError` passes unchanged."""
    if isinstance(exc, BrokerError):
        return exc
    if isinstance(exc, FutureTimeout):
        return BrokerUnreachable(f"{action}: timed out", code="_TIMED_OUT", retriable=True)
    err = exc.args[0] if exc.args else None
    if err is not None and hasattr(err, "name") and hasattr(err, "str"):
        return from_kafka_error(err, action)
    for cls in type(exc).__mro__:
        if cls.__name__ in _AIOKAFKA and cls.__module__.startswith("aiokafka"):
            kind, code = _AIOKAFKA[cls.__name__]
            return kind(f"{action}: {exc or code}", code=code, retriable=kind is BrokerUnreachable)
    return BrokerError(f"{action}: {exc}")


# The top-level modules whose exceptions are a Kafka client's (confluent-kafka's
# KafkaException lives in its C module ``cimpl``).
_CLIENT_MODULES = frozenset({"cimpl", "confluent_kafka", "aiokafka"})


def _is_client_error(exc: BaseException) -> bool:
    if isinstance(exc, FutureTimeout):  # a client future's timeout (also TimeoutError)
        return True
    return any(cls.__module__.split(".")[0] in _CLIENT_MODULES for cls in type(exc).__mro__)


class kafka_errors:  # lower case: a context manager used like a function
    """``with kafka_errors(action): ...`` runs the block; a Kafka client's
    exception (confluent-kafka's ``KafkaException``, an aiokafka error, a
    client future's timeout) leaves it as the typed
    :class:`~streams.errors.BrokerError` of :func:`translate`, its message
    one line starting with ``action``. Our own errors and any other exception
    pass unchanged. A class, not a generator: cheap enough around a poll."""

    __slots__ = ("action",)

    def __init__(self, action: str) -> None:
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or isinstance(exc, BrokerError) or not isinstance(exc, Exception):
            return
        if _is_client_error(exc):
            raise translate(exc, self.action) from None


def is_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` says a newer transactional producer fenced this one."""
    return isinstance(translate(exc, ""), ProducerFenced)


# librdkafka reports refused credentials (SASL) or a failed TLS handshake
# only through its error callback, served by poll(), and its log; the call
# that needed the broker just times out as _TRANSPORT. The callback notes the
# refusal here, per bootstrap string (a few entries per process), so the
# failure can be reported as what it is.
_REFUSED: dict[str, str] = {}
_MAX_REFUSED = 64


def watch_credentials(bootstrap: str) -> Callable[[Any], None]:
    """A librdkafka ``error_cb`` for a new client of ``bootstrap`` (forgets an
    earlier refusal: the settings may have changed)."""
    _REFUSED.pop(bootstrap, None)

    def on_error(err: Any) -> None:
        if str(err.name()) in _AUTHENTICATION:
            if len(_REFUSED) >= _MAX_REFUSED:
                _REFUSED.clear()
            # librdkafka's text names the mechanism and state, never the password.
            _REFUSED[bootstrap] = str(err.str())

    return on_error


def refused_credentials(bootstrap: str) -> AuthenticationFailed | None:
    """The refusal noted for ``bootstrap`` since its last client was made, if
    any (call the client's ``poll(0)`` first: it serves the error callback)."""
    reason = _REFUSED.get(bootstrap)
    if reason is None:
        return None
    return AuthenticationFailed(
        f"broker {bootstrap} refused the connection: {reason} (check the SASL user, "
        f"FENCEWATCH_SASL_PASSWORD, the mechanism and the CA)",
        code="_AUTHENTICATION",
    )


def no_answer(bootstrap: str, timeout_s: float, err: BrokerError) -> BrokerError:
    """A first metadata request that failed although the TCP connection was
    accepted: say which brokers did not answer in time (a TLS/SASL mismatch or
    an advertised listener not reachable from here are the usual causes).
    Other errors (an authentication failure...) pass unchanged."""
    if not isinstance(err, BrokerUnreachable):
        return err
    refused = refused_credentials(bootstrap)
    if refused is not None:
        return refused
    return BrokerUnreachable(
        f"no answer from broker {bootstrap} within {timeout_s:g} s (it accepts TCP "
        f"connections; check the security settings and the broker's advertised "
        f"listeners): {err}",
        code=err.code,
        retriable=True,
    )


#: Seconds each slice of a first metadata request waits (first_metadata).
_METADATA_SLICE_S = 0.5


def first_metadata(
    client: Any, bootstrap: str, timeout_s: float, action: str, topic: str | None = None
) -> Any:
    """A client's first metadata request (``list_topics``), within
    ``timeout_s``, asked in short slices: librdkafka reports a refused login
    through its error callback (served by ``poll``) and keeps retrying, so
    one request for the whole timeout waited it out before saying "refused"
    (30 s for a wrong password). Between slices the callback is served and
    a refusal ends the wait at once; past the timeout it is :func:`no_answer`."""
    deadline = time.monotonic() + timeout_s
    while True:
        wait = max(0.05, min(_METADATA_SLICE_S, deadline - time.monotonic()))
        try:
            with kafka_errors(action):
                if topic is None:
                    return client.list_topics(timeout=wait)
                return client.list_topics(topic, timeout=wait)
        except BrokerError as err:
            client.poll(0)  # serves the error callback (and queued log lines)
            refused = refused_credentials(bootstrap)
            if refused is not None:
                raise refused from None
            if not isinstance(err, BrokerUnreachable) or time.monotonic() >= deadline:
                raise no_answer(bootstrap, timeout_s, err) from None


def topic_unavailable(topic: str, bootstrap: str, err: Any = None) -> BrokerError:
    """A topic the metadata answer did not give: :class:`TopicMissing` saying it
    does not exist on ``bootstrap`` (with the command that makes fencewatch's
    topics), or, when the broker said something else about it (an ACL
    refusal...), that error typed as such. ``err``: the topic's metadata error."""
    if err is not None and str(err.name()) not in _MISSING:
        return from_kafka_error(err, f"topic {topic}")
    return TopicMissing(
        f"topic {topic} does not exist on {bootstrap} (check the name; "
        f"`fencewatch topics create` makes fencewatch's topics)",
        code="UNKNOWN_TOPIC_OR_PART",
    )
