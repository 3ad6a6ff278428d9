"""Every error exported from ``fencewatch`` round-trips through pickle (so
through multiprocessing and Celery's result backends) as itself, with its
message and fields: a worker that raises StaleOwner in another process is
caught as StaleOwner, not as a bare FencewatchError or a PicklingError."""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

import fencewatch
from fencewatch import (
    AuthenticationFailed,
    AuthorizationFailed,
    BrokerError,
    BrokerUnreachable,
    CommitFailed,
    ConfigError,
    DeliveryFailed,
    EffectRefused,
    FencewatchError,
    InvalidEffectMessage,
    InvalidEvent,
    Lease,
    LeaseHeld,
    LeaseLost,
    LeaseUnpublished,
    MissingExtra,
    NotAFinding,
    ProducerFenced,
    StaleOwner,
    StateError,
    StoreError,
    StoreUnavailable,
    StoreURLError,
    TooManyFindings,
    TopicMissing,
)

_LEASE = Lease("tenant/export/2026-07-26", 18, "beta", 7, 1_000_030.0)

#: One instance of each exported error, every field set away from its default.
SAMPLES: dict[type[BaseException], Callable[[], BaseException]] = {
    FencewatchError: lambda: FencewatchError("something failed"),
    ConfigError: lambda: ConfigError("max_events_per_key must be at least 8"),
    InvalidEvent: lambda: InvalidEvent("epoch", "must be an integer"),
    StateError: lambda: StateError("state written by a newer build"),
    BrokerError: lambda: BrokerError("refused", code="REQUEST_TIMED_OUT", retriable=True),
    BrokerUnreachable: lambda: BrokerUnreachable("down", code="_TRANSPORT", retriable=True),
    AuthenticationFailed: lambda: AuthenticationFailed("bad login", code="_AUTHENTICATION"),
    AuthorizationFailed: lambda: AuthorizationFailed("acl", code="TOPIC_AUTHORIZATION_FAILED"),
    TopicMissing: lambda: TopicMissing("no topic", code="UNKNOWN_TOPIC_OR_PART"),
    ProducerFenced: lambda: ProducerFenced("fenced", code="PRODUCER_FENCED"),
    StoreError: lambda: StoreError("postgres: deadlock", retriable=True),
    StoreUnavailable: lambda: StoreUnavailable("postgres unavailable: refused"),
    StoreURLError: lambda: StoreURLError("mysql://u:***@h/db", "no store supports 'mysql'"),
    EffectRefused: lambda: EffectRefused(
        "k",
        17,
        "charge-card",
        "irreversible",
        "store_unavailable",
        "timed out",
        evidence_error=BrokerError("no broker", code="_TRANSPORT"),
    ),
    LeaseHeld: lambda: LeaseHeld("k", "alpha", 17, 1_000_030.5),
    LeaseLost: lambda: LeaseLost("k", 17, 18, "displaced"),
    StaleOwner: lambda: StaleOwner("k", 17, 18, "displaced by epoch 18"),
    LeaseUnpublished: lambda: LeaseUnpublished(
        _LEASE, BrokerError("queue full", code="_QUEUE_FULL", retriable=True)
    ),
    MissingExtra: lambda: MissingExtra("postgres", "psycopg"),
    CommitFailed: lambda: CommitFailed("position not stored"),
    TooManyFindings: lambda: TooManyFindings("more than 100000 findings"),
    NotAFinding: lambda: NotAFinding("not JSON"),
    DeliveryFailed: lambda: DeliveryFailed("webhook answered 503", retriable=True),
    InvalidEffectMessage: lambda: InvalidEffectMessage("no fencewatch-epoch header"),
}


def _exported_errors() -> list[type[BaseException]]:
    # A set: an alias (SettingsError is ConfigError) is one class.
    return sorted(
        {
            obj
            for name in fencewatch.__all__
            if isinstance(obj := getattr(fencewatch, name), type) and issubclass(obj, BaseException)
        },
        key=lambda cls: cls.__name__,
    )


def _fields(exc: BaseException) -> dict[str, Any]:
    # Nested errors compare by type and message (exceptions compare by identity).
    return {
        k: (type(v), str(v)) if isinstance(v, BaseException) else v for k, v in vars(exc).items()
    }


def test_every_exported_error_has_a_sample() -> None:
    """The table below covers every exception class in fencewatch.__all__, so
    a newly exported error cannot escape the round-trip test."""
    assert sorted(SAMPLES, key=lambda c: c.__name__) == _exported_errors()


@pytest.mark.parametrize("cls", _exported_errors(), ids=lambda c: c.__name__)
def test_exported_error_round_trips_through_pickle(cls: type[BaseException]) -> None:
    """pickle.loads(pickle.dumps(e)) is the same class with the same message,
    args and fields, at every protocol."""
    original = SAMPLES[cls]()
    assert type(original) is cls
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(original, protocol=protocol))
        assert type(copy) is cls
        assert str(copy) == str(original)
        assert copy.args == original.args
        assert _fields(copy) == _fields(original)


def _raise_stale_owner() -> None:
    raise StaleOwner("tenant/export/2026-07-26", 17, 18, "displaced by epoch 18")


def test_stale_owner_raised_in_another_process_is_caught_as_itself() -> None:
    """A StaleOwner raised in a worker process arrives in the parent as a
    StaleOwner with its key and epochs (what Celery's autoretry_for needs)."""
    # spawn, not fork: a test before this one in the same process may have left
    # librdkafka threads running, and a forked child of them can die at once
    # (BrokenProcessPool after tests/live/test_rdkafka_engine.py, once).
    with ProcessPoolExecutor(
        max_workers=1, mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        future = pool.submit(_raise_stale_owner)
        with pytest.raises(StaleOwner) as info:
            future.result(timeout=60)
    assert (info.value.key, info.value.epoch, info.value.current_epoch) == (
        "tenant/export/2026-07-26",
        17,
        18,
    )
