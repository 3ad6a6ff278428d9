"""Public name of :mod:`streams.integrations.runs` (see docs/integrations.md)."""

from __future__ import annotations

from streams.integrations.runs import *  # noqa: F403  (re-export: the module's __all__)
from streams.integrations.runs import __all__ as __all__
