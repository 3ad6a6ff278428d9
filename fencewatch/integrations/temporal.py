"""Public name of :mod:`streams.integrations.temporal` (see docs/integrations.md)."""

from __future__ import annotations

from streams.integrations.temporal import *  # noqa: F403  (re-export: the module's __all__)
from streams.integrations.temporal import __all__ as __all__
