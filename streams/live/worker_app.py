"""The faust app for faust's own command line under its first name:
``faust -A streams.live.worker_app worker`` is in operators' scripts and unit
files from before the engines had packages of their own, so it keeps working.
The module is :mod:`streams.live.faust.worker_app`; importing either builds
the app from ``FENCEWATCH_*`` settings.
"""

from __future__ import annotations

from streams.live.faust.worker_app import app

__all__ = ["app"]
