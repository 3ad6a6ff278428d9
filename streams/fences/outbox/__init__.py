"""The transactional outbox, fenced like Kafka's ``ProducerFencedException``.

Three parts, one module each:

* :mod:`.table` — :class:`Outbox` stages an effect in the outbox table inside
  the same database transaction that compares the owner's epoch with the
  lease table: a displaced owner cannot even stage.
* :mod:`.producer` — :class:`OutboxProducer` publishes one owner's staged
  effects to the effects topic inside Kafka transactions whose
  ``transactional.id`` is per workflow key, so a newer owner fences the older
  producer.
* :mod:`.applier` — :class:`EffectApplier` is the consuming-side fence: it
  applies an effect message through a fenced sink only if the epoch in its
  header is current.

See docs/fences.md for the race between the lease check and the producer
initialization, and why the consuming fence closes it.
"""

from __future__ import annotations

from streams.fences.outbox.applier import (
    EffectApplier,
    EffectMessage,
    InvalidEffectMessage,
    parse_effect_message,
)
from streams.fences.outbox.producer import (
    EFFECT_KEY_HEADER,
    EPOCH_HEADER,
    IDEMPOTENCY_HEADER,
    WORKER_HEADER,
    OutboxProducer,
    OutboxSettings,
    transactional_id_for,
)
from streams.fences.outbox.table import Outbox, StagedEffect

__all__ = [
    "EFFECT_KEY_HEADER",
    "EPOCH_HEADER",
    "IDEMPOTENCY_HEADER",
    "WORKER_HEADER",
    "EffectApplier",
    "EffectMessage",
    "InvalidEffectMessage",
    "Outbox",
    "OutboxProducer",
    "OutboxSettings",
    "StagedEffect",
    "parse_effect_message",
    "transactional_id_for",
]
