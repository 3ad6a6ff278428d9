"""What every runtime adapter hands to user code: one owned run of a workflow.

An :class:`OwnedRun` wraps the :class:`~streams.sdk.owner.Owner` of the
workflow key (the lease the SDK renews in the background) and offers the
calls that make evidence: :meth:`OwnedRun.checkpoint` (``progress``) and
:meth:`OwnedRun.effect`, which goes through :meth:`Owner.effect
<streams.sdk.owner.Owner.effect>` and so through the owner's risk policy:

* a lost owner (displaced, or not renewed within its TTL: ``owner.lost``)
  attempts nothing; the refusal is reported (``effect_rejected``,
  ``reason: lease_lost``) and :class:`~streams.errors.StaleOwner` raised;
* a current owner stamps, reports ``effect_attempted``, and the destination's
  compare-and-set decides (a pause can fall between any client-side check and
  the write: that is the case the fence exists for); a refusal is reported and
  raises StaleOwner, so the runtime stops the stale run (LangGraph aborts the
  graph, Celery fails the task);
* when the lease store cannot be reached, the effect's ``risk`` decides:
  ``irreversible`` (the default) fails closed with
  :class:`~streams.errors.EffectRefused`; ``deferrable`` is queued and
  committed once the store answers, only if the epoch is still current. The
  runtime's step goes on; :meth:`OwnedRun.settle` (called by the adapters when
  the owner is closed) raises StaleOwner if a deferred effect was refused as
  stale in the meantime.

The default risk is set per run (a LangGraph node: ``@fenced(risk=...)``; a
Celery task: ``fence_risk``) and per effect (``risk=``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from streams.errors import LeaseLost, StaleOwner
from streams.fences.sink import EffectSink, Receipt
from streams.sdk.owner import RISKS, EffectOutcome, Risk

if TYPE_CHECKING:
    from streams.fences.outbox import Outbox
    from streams.sdk.owner import Owner

__all__ = ["DEFAULT_RISK", "OutboxSink", "OwnedRun", "check_risk"]

#: An effect whose author said nothing is treated as the dangerous class.
DEFAULT_RISK: Risk = "irreversible"


def check_risk(risk: object) -> Risk:
    """``risk`` if it is one of :data:`~streams.sdk.owner.RISKS`, else ValueError."""
    for known in RISKS:
        if risk == known:
            return known
    raise ValueError(f"risk must be one of {', '.join(RISKS)}, got {risk!r}")


class _Deferred:
    """The deferred outcomes of one run, shared by its per-node views;
    bounded like the owner's queue (``max_deferred``): only the waiting ones
    and the ones that ended badly are kept."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.lock = threading.Lock()
        self.outcomes: list[EffectOutcome] = []

    def add(self, outcome: EffectOutcome) -> None:
        with self.lock:
            if len(self.outcomes) >= self.bound:
                # Forget those that committed; the owner refuses past its own bound.
                self.outcomes = [o for o in self.outcomes if not (o.done() and o.accepted)]
            self.outcomes.append(outcome)


class OwnedRun:
    """One worker's run of one workflow key, under its owner epoch.

    ``risk`` is the default risk of this run's effects. :meth:`with_risk`
    returns a view with another default that shares the owner (how a
    LangGraph node gets its own)."""

    __slots__ = ("_deferred", "owner", "risk")

    def __init__(
        self, owner: Owner, *, risk: Risk = DEFAULT_RISK, _deferred: _Deferred | None = None
    ) -> None:
        self.owner = owner
        self.risk = check_risk(risk)
        self._deferred = _deferred if _deferred is not None else _Deferred(owner.max_deferred)

    def with_risk(self, risk: Risk | None) -> OwnedRun:
        """This run with ``risk`` as the default (itself when None or the same)."""
        if risk is None or risk == self.risk:
            return self
        return OwnedRun(self.owner, risk=risk, _deferred=self._deferred)

    @property
    def key(self) -> str:
        return self.owner.key

    @property
    def epoch(self) -> int:
        return self.owner.epoch

    @property
    def worker_id(self) -> str:
        return self.owner.worker_id

    @property
    def lost(self) -> threading.Event:
        """Set the moment the lease is lost (``owner.lost``): wait on it, or
        poll it in a long loop."""
        return self.owner.lost

    def check(self, where: str = "") -> None:
        """Raise StaleOwner if the lease is lost (displaced, or not renewed in
        time: ``owner.check()``). For the start of a step or a loop turn; the
        fence still decides every effect."""
        try:
            self.owner.check()
        except LeaseLost as exc:
            raise _stale(exc, where) from None

    def checkpoint(self, **attrs: Any) -> bool:
        """Report ``progress``; False when a higher epoch was acquired (this
        worker has been displaced: stop before doing more; ``check()`` raises)."""
        return self.owner.progress(attrs or None)

    def effect(
        self,
        sink: EffectSink,
        effect_key: str,
        payload: bytes,
        *,
        risk: Risk | None = None,
        idempotency_key: str | None = None,
    ) -> EffectOutcome:
        """Apply one effect through the owner (stamp, ``effect_attempted``, the
        sink's compare-and-set, the receipt's event) at ``risk`` (default: the
        run's). Returns the outcome: ``committed`` or ``duplicate``, or
        ``deferred`` for a deferrable effect waiting for the lease store.

        Raises StaleOwner when the lease is lost or the destination refused
        the effect as stale (the ``effect_rejected`` event is published
        first), EffectRefused when an irreversible effect is refused because
        the lease store does not answer, StoreUnavailable when it was
        attempted but the destination did not answer (outcome unknown)."""
        try:
            outcome = self.owner.effect(
                sink,
                effect_key,
                payload,
                risk=self.risk if risk is None else check_risk(risk),
                idempotency_key=idempotency_key,
            )
        except LeaseLost as exc:
            raise _stale(exc, f"{effect_key!r} not attempted") from None
        if outcome.status == "rejected":
            raise _refused(self, sink.name, outcome)
        if outcome.status == "deferred":
            self._deferred.add(outcome)
        return outcome

    def settle(self) -> None:
        """After the owner closed (its deferred effects drained): raise
        StaleOwner if a deferred effect was refused as stale, or the error a
        deferred effect failed with. A no-op when nothing was deferred."""
        with self._deferred.lock:
            outcomes, self._deferred.outcomes = self._deferred.outcomes, []
        for outcome in outcomes:
            if outcome.status == "rejected":
                raise _refused(self, "the destination", outcome)
            if outcome.status == "failed" and outcome.error is not None:
                raise outcome.error


def _stale(exc: LeaseLost, where: str) -> StaleOwner:
    detail = f"lease lost: {exc.reason}" + (f" ({where})" if where else "")
    return StaleOwner(exc.key, exc.epoch, exc.current_epoch, detail)


def _refused(run: OwnedRun, sink_name: str, outcome: EffectOutcome) -> StaleOwner:
    receipt = outcome.receipt
    reason = receipt.reason if receipt is not None else None
    current = receipt.current_epoch if receipt is not None else None
    name = receipt.sink if receipt is not None and receipt.sink else sink_name
    return StaleOwner(
        run.key, run.epoch, current, f"{name} refused {outcome.effect_key!r} ({reason})"
    )


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
