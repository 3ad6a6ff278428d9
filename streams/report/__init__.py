"""Audit reports: text for a person at a terminal, JSON and JSON Lines for
machines, HTML with ownership timelines for a post-incident review.

Renderers are pure: they take the replay's results and return text; the CLI
writes it.
"""

from __future__ import annotations

from streams.report.html import render_html
from streams.report.machine import render_json, render_jsonl
from streams.report.text import render_text

__all__ = ["FORMATS", "render_html", "render_json", "render_jsonl", "render_text"]

FORMATS = ("text", "json", "jsonl", "html")
