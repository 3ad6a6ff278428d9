"""``fencewatch serve``: the live operator console. A bounded in-memory view
of the status and findings topics (:mod:`.view`, kept by :mod:`.follow`),
served over HTTP (:mod:`.server`, pages in :mod:`.pages`), with each
workflow's ownership timeline from a bounded replay of its events
(:mod:`.timeline`) and verification behind a token (:mod:`.auth`); the
whole assembled in :mod:`.app`. See docs/operate.md.

This package imports nothing of the ``kafka`` extra (confluent-kafka,
prometheus-client) at import time, so that building the command's parser
never needs it; :mod:`.app` does.
"""

from __future__ import annotations

from streams.console.view import FINDINGS_BYTES, PAGE_SIZE, STATUS_BYTES, ConsoleView

__all__ = ["FINDINGS_BYTES", "PAGE_SIZE", "STATUS_BYTES", "ConsoleView"]
