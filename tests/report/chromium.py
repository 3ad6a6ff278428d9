"""Headless Chromium (the system ``chromium``, no pip package) for the HTML
report: layout checks read back from the rendered DOM, and screenshots.

The check script is appended to a copy of the page; it measures the laid-out
page (no horizontal scroll, every finding mark on screen and on top, lane
labels) and writes the results as JSON into a hidden element, which
``--dump-dom`` returns once the page has loaded.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["CHECK_SCRIPT", "ChromiumMissing", "check_layout", "chromium", "screenshot"]


class ChromiumMissing(RuntimeError):
    """No Chromium binary on PATH (Debian: apt-get install chromium)."""


CHECK_SCRIPT = """
<script>
(function(){
  /*BEFORE*/
  var de = document.documentElement, W = de.clientWidth;
  var r = {clientWidth: W, scrollWidth: de.scrollWidth, bodyScrollWidth: document.body.scrollWidth,
           pageHeight: de.scrollHeight, marks: [], labels: [], timelines: 0};
  // Milliseconds from the start of navigation to here: the page parsed, its
  // script run and laid out (scrollWidth above forces the layout).
  r.renderMs = performance.now();
  r.pagers = Array.from(document.querySelectorAll('.paged')).map(function(p){
    return {table: p.getAttribute('data-table'), rows: p.querySelectorAll('tbody tr').length,
            pg: p.querySelector('.pg').textContent,
            first: (p.querySelector('tbody tr td') || {}).textContent || null}; });
  r.timelineKeys = Array.from(document.querySelectorAll('section.wf h3')).map(function(h){
    return h.textContent; });
  var tls = document.querySelectorAll('.tl');
  r.scrolled = Array.from(document.querySelectorAll('.tl-scroll')).map(function(x){
    return x.scrollLeft; });
  r.timelines = tls.length;
  // Each table against the box it sits in: wider is fine only if that box scrolls.
  r.tables = Array.from(document.querySelectorAll('table')).map(function(t){
    var box = t.parentElement, row = t.querySelector('td');
    return {cls: t.className, width: t.scrollWidth, box: box.clientWidth,
            overflowX: getComputedStyle(box).overflowX,
            cellDisplay: row ? getComputedStyle(row).display : null};
  });
  r.firstTimelineBottom = tls.length ?
    tls[0].getBoundingClientRect().bottom + window.scrollY : 0;
  document.querySelectorAll('.lane-label').forEach(function(l){
    var b = l.getBoundingClientRect();
    r.labels.push({text: Array.from(l.children).map(function(c){ return c.textContent; }).join(' '),
                   left: b.left, width: b.width, height: b.height});
  });
  document.querySelectorAll('.fmark[data-finding]').forEach(function(m){
    // Scroll the page only (vertically): a mark clipped by its timeline's
    // own scroll box must count as not visible.
    var top = m.getBoundingClientRect().top + window.scrollY;
    window.scrollTo(0, Math.max(0, top - window.innerHeight / 2));
    var b = m.getBoundingClientRect();
    var hit = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
    r.marks.push({id: m.getAttribute('data-finding'), text: m.textContent, left: b.left,
                  right: b.right, width: b.width, height: b.height,
                  onTop: !!hit && (hit === m || m.contains(hit))});
  });
  window.scrollTo(0, 0);
  var pre = document.createElement('pre');
  pre.id = 'fw-check'; pre.style.display = 'none'; pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
})();
</script>
"""


def chromium() -> str:
    """The Chromium binary, or :class:`ChromiumMissing` saying how to get it."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise ChromiumMissing("no chromium on PATH: apt-get install chromium (.ci/run does)")


def _run(args: list[str], timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="fw-chromium-") as profile:
        proc = subprocess.run(
            [
                chromium(),
                "--headless",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={profile}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"chromium exited {proc.returncode}: {tail}")
    return proc.stdout


def check_layout(
    html: str, *, width: int = 1400, height: int = 1000, before: str = ""
) -> dict[str, Any]:
    """Lay ``html`` out at ``width`` x ``height`` and return what the check
    script measured (see :data:`CHECK_SCRIPT`); ``before`` is JavaScript run
    first (e.g. clicking the page's own buttons)."""
    marker = "</body>"
    if marker not in html:
        raise ValueError("not an HTML page with a body")
    script = CHECK_SCRIPT.replace("/*BEFORE*/", before)
    page = html.replace(marker, script + marker, 1)
    with tempfile.TemporaryDirectory(prefix="fw-report-") as tmp:
        path = Path(tmp) / "report.html"
        path.write_text(page, encoding="utf-8")
        dom = _run([f"--window-size={width},{height}", "--dump-dom", path.as_uri()], 90)
    start = dom.find('<pre id="fw-check"')
    if start < 0:
        raise RuntimeError("the check script left no result (did the page load?)")
    start = dom.index(">", start) + 1
    end = dom.index("</pre>", start)
    text = dom[start:end].replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    result: dict[str, Any] = json.loads(text)
    return result


def screenshot(html_path: Path, png: Path, *, width: int = 1400, height: int) -> None:
    """A PNG of the page's first ``height`` pixels at ``width``."""
    _run(
        [
            f"--window-size={width},{height}",
            "--hide-scrollbars",
            f"--screenshot={png}",
            html_path.resolve().as_uri(),
        ],
        90,
    )
    if not png.exists():
        raise RuntimeError(f"chromium wrote no screenshot to {png}")
