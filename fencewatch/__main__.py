"""``python -m fencewatch`` is the ``fencewatch`` command (for an environment
whose scripts directory is not on PATH)."""

from __future__ import annotations

from streams.cli import main

raise SystemExit(main())
