"""What every runtime adapter hands to user code: one owned run of a workflow.

An :class:`OwnedRun` pairs the :class:`~streams.sdk.owner.Owner` of the
workflow key (the lease the SDK keeps renewed) with its reporter, and offers
the two calls that make evidence: :meth:`OwnedRun.checkpoint` (``progress``)
and :meth:`OwnedRun.effect` (``effect_attempted`` → the destination's
compare-and-set → ``effect_committed``/``effect_rejected``).

Effects are not pre-checked against ``owner.lost``: the destination's fence
is the authority (a pause can fall between any client-side check and the
write, which is exactly the case it exists for), and the attempt of a worker
that missed its lease loss is the evidence an operator needs. A rejection
raises :class:`~streams.errors.StaleOwner`, so the runtime stops the stale
run (LangGraph aborts the graph, Celery fails the task).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streams.errors import LeaseLost, StaleOwner
from streams.fences.sink import EffectSink, Receipt

if TYPE_CHECKING:
    from streams.fences.outbox import Outbox
    from streams.sdk.owner import Owner
    from streams.sdk.reporter import OwnershipReporter

__all__ = ["OutboxSink", "OwnedRun"]


@dataclass(frozen=True, slots=True)
class OwnedRun:
    """One worker's run of one workflow key, under its owner epoch."""

    owner: Owner
    reporter: OwnershipReporter

    @property
    def key(self) -> str:
        return self.owner.key

    @property
    def epoch(self) -> int:
        return self.owner.epoch

    @property
    def worker_id(self) -> str:
        return self.owner.worker_id

    def stop_if_lost(self, where: str) -> None:
        """Raise StaleOwner if the lease is lost (displaced, or not renewed in
        time: see ``Owner.check``). For the start of a step, never instead of
        the fence."""
        try:
            self.owner.check()
        except LeaseLost as exc:
            raise StaleOwner(
                self.key, self.epoch, exc.current_epoch, f"{exc.reason} ({where})"
            ) from None

    def checkpoint(self, **attrs: Any) -> bool:
        """Report ``progress``; False when a higher epoch was acquired (this
        worker has been displaced: stop before doing more)."""
        return self.owner.progress(attrs or None)

    def effect(
        self,
        sink: EffectSink,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        """Apply one effect through the fence, with evidence. Returns the
        receipt (``committed`` or ``duplicate``); raises StaleOwner when the
        destination refused it (the ``effect_rejected`` event is published
        first)."""
        receipt = self.reporter.apply_effect(
            sink, self.key, self.epoch, effect_key, payload, idempotency_key=idempotency_key
        )
        if receipt.status == "rejected":
            raise StaleOwner(
                self.key,
                self.epoch,
                receipt.current_epoch,
                f"{sink.name} refused {effect_key!r} ({receipt.reason})",
            )
        return receipt


class OutboxSink:
    """The transactional outbox as an effect destination: ``apply`` stages the
    effect in the same transaction that compares the epoch with the lease
    table (see docs/fences.md); the outbox producer publishes it later."""

    def __init__(self, outbox: Outbox, *, name: str = "outbox") -> None:
        self.outbox = outbox
        self.name = name

    def apply(
        self,
        workflow_key: str,
        epoch: int,
        effect_key: str,
        payload: bytes,
        *,
        idempotency_key: str | None = None,
    ) -> Receipt:
        return self.outbox.stage(
            workflow_key, epoch, effect_key, payload, idempotency_key=idempotency_key
        )
