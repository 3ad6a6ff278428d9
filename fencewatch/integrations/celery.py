"""Public name of :mod:`streams.integrations.celery` (see docs/integrations.md)."""

from __future__ import annotations

from streams.integrations.celery import *  # noqa: F403  (re-export: the module's __all__)
from streams.integrations.celery import __all__ as __all__
