"""The status record's JSON document (SPEC §8) as a ``msgspec.Struct``:
what :func:`streams.core.status.status_json` encodes.

Interpreted, not compiled (mypyc does not compile ``msgspec.Struct``
subclasses). A Struct, not the dict of ``status._document``: msgspec writes
a Struct's fields from their pre-encoded names, and building one is a C call,
so a status record costs about two thirds of the dict's (docs/performance.md).
The bytes are the same (tests/core/test_status.py compares them with
``WorkflowStatus.to_json``): field order, and the stale epochs and finding
references, frozen dataclasses, written as objects in their field order.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["StatusDocument"]


class StatusDocument(msgspec.Struct, gc=False):
    """The fields of a :class:`~streams.core.status.WorkflowStatus`, in its
    order. Not tracked by the collector: it lives only while it is encoded."""

    workflow_key: str
    current_epoch: Any
    current_worker: Any
    acquired_seq: Any
    acquisition_implied: Any
    released: bool
    last_position: Any
    stale_epochs: Any
    open: Any
    cleared: Any
    worst_open: Any
    updated_ms: Any
