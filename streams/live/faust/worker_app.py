"""An app for faust's own command line, built from ``FENCEWATCH_*`` settings
when (and only when) this module is imported::

    FENCEWATCH_BOOTSTRAP_SERVERS=127.0.0.1:9092 \\
        faust -A streams.live.faust.worker_app worker -l info

``fencewatch run`` is the same processor without this module; the old name,
``streams.live.worker_app``, still works (:mod:`streams.live.worker_app`).
"""

from __future__ import annotations

import os

from streams.live.runner import prepare_app
from streams.live.settings import settings_from_env

__all__ = ["app"]

app = prepare_app(settings_from_env(os.environ))
