"""The console's style sheet (on top of the HTML report's) and its scripts.
The scripts build every event-derived string into the page with
``textContent`` and element properties, never as markup."""

from __future__ import annotations

__all__ = ["CSS", "INDEX_JS", "WORKFLOW_JS"]

CSS = """
header.top{display:flex;gap:16px;align-items:baseline;flex-wrap:wrap;margin-bottom:12px}
header.top .sp{flex:1}
.banner.ro{background:#eef3fd;border:1px solid #b6c9f0;color:#1f3b72}
.banner.err{background:#fdf0ef;border:1px solid #f1b5b0;color:#8c1d18}
.banner[hidden]{display:none}
form.filters{display:flex;gap:10px;align-items:center;flex-wrap:wrap;margin:0 0 12px}
form.filters input[type=text]{width:22em}
input,select,button{font:inherit;padding:4px 8px}
td.key a{overflow-wrap:anywhere;display:-webkit-box;-webkit-line-clamp:3;
-webkit-box-orient:vertical;overflow:hidden}
td.key{max-width:36em}
.stale{display:block;color:var(--crit);overflow-wrap:anywhere}
.stale.settled{color:var(--muted)}
tr.stale-row.acting td{color:var(--crit)} tr.stale-row.acting td.stands{font-weight:650}
tr.stale-row.settled td{color:var(--muted)} td.stands{white-space:nowrap}
td.stale-cell{min-width:18em}
.pager{display:flex;gap:12px;align-items:center;margin:10px 0}
.live{font-size:12px;color:var(--muted)}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0}
.kv dt{color:var(--muted)} .kv dd{margin:0;overflow-wrap:anywhere}
h3.wkey{max-height:7.5em;overflow:auto}
form.verify{display:flex;gap:8px;flex-wrap:wrap;align-items:center;margin-top:6px}
form.verify[hidden]{display:none}
pre.rev{white-space:pre-wrap;overflow-wrap:anywhere;max-height:24em;overflow:auto;
background:#f3f4f6;padding:8px;border-radius:6px;font-size:12px}
.notice{background:#eff8f1;border:1px solid #b7dfc2;border-radius:8px;padding:8px 12px;margin:0 0 12px}
.sev.invalid{background:#fff;color:#8c1d18;border:1px dashed #8c1d18;margin-right:4px}
.invalid-why{display:block;color:#8c1d18;font-size:12px;overflow-wrap:anywhere}
"""  # noqa: E501

# The list: polls /api/workflows (the page's own query) every second and
# rebuilds the rows; a failed poll says so and keeps the last rows. A row the
# script cannot draw (a value it did not expect: the server checks values,
# this is the second line) is drawn as invalid with the error, and the poll
# goes on whatever happened: one record never blanks the list. The processor
# banner follows the poll's ``processor`` (its message as text; hidden when null).
INDEX_JS = r"""
(function(){
  var body = document.getElementById('rows'), info = document.getElementById('live');
  var pager = document.getElementById('pager'), note = document.getElementById('empty');
  var proc = document.getElementById('processor');
  function cell(tr, text, cls){ var td = document.createElement('td');
    if (cls) td.className = cls; if (text !== null) td.textContent = text; tr.appendChild(td); return td; }
  function ok(ms){ return typeof ms === 'number' && isFinite(new Date(ms).getTime()); }
  function when(ms){ return ok(ms) ? new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : 'invalid time'; }
  function rel(ms){ if (!ok(ms)) return 'invalid time'; var s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    return (s < 120 ? s + ' s' : s < 7200 ? Math.round(s / 60) + ' min' :
      s < 172800 ? Math.round(s / 3600) + ' h' : Math.round(s / 86400) + ' d') + ' ago'; }
  function ago(ms){ return ms === null || ms === undefined ? '' : when(ms) + ' (' + rel(ms) + ')'; }
  function badge(td, cls, text, title){ var b = document.createElement('span'); b.className = cls;
    b.textContent = text; if (title) b.title = title; td.appendChild(b); return b; }
  function invalid(tr, why){ tr.className = 'invalid-row'; tr.setAttribute('data-invalid', why); }
  function row(w){
    try { return build(w); } catch (e) {
      // Not a record this script can draw: one row that says so, the rest as usual.
      var tr = document.createElement('tr'), why = 'cannot show this record: ' + e;
      invalid(tr, why); tr.setAttribute('data-key', String(w && w.workflow_key));
      badge(cell(tr, null, 'nw'), 'sev invalid', 'invalid', why); cell(tr, '', 'num'); cell(tr, '', 'num');
      var k = cell(tr, String(w && w.workflow_key), 'key');
      badge(k, 'invalid-why', why); cell(tr, ''); cell(tr, ''); cell(tr, '');
      return tr; } }
  function build(w){
    var tr = document.createElement('tr'); tr.setAttribute('data-key', w.workflow_key);
    var td = cell(tr, null, 'nw');
    if (w.invalid){ invalid(tr, w.invalid); badge(td, 'sev invalid', 'invalid', w.invalid); }
    if (w.worst_open){ badge(td, 'sev ' + w.worst_open, w.worst_open); }
    else if (!w.invalid){ td.textContent = 'none'; td.className = 'nw muted'; }
    cell(tr, String(w.open_count), 'num open-count');
    cell(tr, String(w.cleared_count), 'num cleared-count');
    var k = cell(tr, null, 'key'); var a = document.createElement('a');
    a.setAttribute('href', w.href); a.textContent = w.workflow_key; k.appendChild(a);
    if (w.invalid) badge(k, 'invalid-why', 'invalid record: ' + w.invalid);
    cell(tr, w.current_epoch === null || w.current_epoch === undefined ? '' :
      'epoch ' + w.current_epoch + ' · ' + w.current_worker + (w.released ? ' (released)' : ''), 'owner');
    var st = cell(tr, null, 'stale-cell');
    // Nothing open: the epochs are still listed (evidence freshness, SPEC §8) but
    // drawn muted, saying there is nothing left to do about them.
    var calm = w.open_count === 0, tail = !calm ? '' :
      w.cleared_count > 0 ? ' · findings cleared' : ' · no finding';
    (w.stale_epochs || []).forEach(function(s){ var sp = document.createElement('span');
      sp.className = calm ? 'stale settled' : 'stale';
      sp.textContent = 'epoch ' + s.epoch + ' · ' + s.worker + ' · ' + s.events +
        (s.events === 1 ? ' event' : ' events') + ' · last seen ' +
        (s.last_seen_ms === null || s.last_seen_ms === undefined ? 'unknown' : ago(s.last_seen_ms)) + tail;
      st.appendChild(sp); });
    var up = cell(tr, w.updated_ms ? rel(w.updated_ms) : '', 'nw muted');
    if (w.updated_ms) up.title = when(w.updated_ms);
    return tr; }
  function draw(d){
    var frag = document.createDocumentFragment(); d.workflows.forEach(function(w){ frag.appendChild(row(w)); });
    body.textContent = ''; body.appendChild(frag);
    note.hidden = d.total > 0;
    pager.textContent = 'page ' + d.page + ' of ' + d.pages + ' · ' + d.total + ' workflows match · ' +
      d.page_size + ' per page';
    // Only the links to pages that exist (the server renders both hidden).
    [['prev', d.page - 1, d.page > 1], ['next', d.page + 1, d.page < d.pages]].forEach(function(l){
      var a = document.getElementById(l[0]); if (!a) return; a.hidden = !l[2];
      if (l[2]){ var q = new URLSearchParams(location.search); q.set('page', String(l[1]));
        a.setAttribute('href', '?' + q.toString()); } });
    info.textContent = 'live · updated ' + new Date().toLocaleTimeString() + ' · ' + d.held + ' workflows held' +
      (d.errors.length ? ' · ' + d.errors.join('; ') : '');
    document.body.setAttribute('data-version', String(d.version));
    if (proc){ var p = d.processor;
      proc.hidden = !p; proc.textContent = p ? String(p.message) : '';
      proc.className = 'banner ' + (p && p.stalled ? 'err' : 'ro');
      proc.setAttribute('data-stalled', p && p.stalled ? 'true' : 'false'); } }
  function poll(){
    var x = new XMLHttpRequest(); x.open('GET', '/api/workflows' + location.search);
    x.onload = function(){
      try { if (x.status === 200) draw(JSON.parse(x.responseText));
        else info.textContent = 'update failed: HTTP ' + x.status; }
      catch (e) { info.textContent = 'update failed: ' + e; }
      finally { setTimeout(poll, 1000); } };
    x.onerror = function(){ info.textContent = 'update failed: console unreachable'; setTimeout(poll, 1000); };
    x.send(); }
  poll();
})();
"""  # noqa: E501

# One workflow: polls /api/w/<key> every 2 s and updates each finding's
# status pill, the counts and how each displaced epoch's findings stand
# (counted as pages.epoch_findings does, worded as pages.findings_label; the
# rest of the page is a snapshot).
WORKFLOW_JS = r"""
(function(){
  var key = document.body.getAttribute('data-key');
  function poll(){
    var x = new XMLHttpRequest(); x.open('GET', '/api/w/' + encodeURIComponent(key));
    x.onload = function(){ try {
      if (x.status === 200){ var d = JSON.parse(x.responseText), st = d.status || {};
        var cleared = {}; (st.cleared || []).forEach(function(f){ cleared[f.finding_id] = 1; });
        document.querySelectorAll('[data-health]').forEach(function(p){
          var s = cleared[p.getAttribute('data-health')] ? 'cleared' : 'open';
          p.textContent = s; p.className = 'pill ' + s;
          p.closest('section').querySelectorAll('form.verify').forEach(function(f){
            f.hidden = s === 'cleared'; }); });
        var by = {}; (d.findings || []).forEach(function(f){ var e = null, r = f.revisions || [];
          for (var i = r.length - 1; i >= 0 && e === null; i--){ var v = r[i] && r[i].stale_epoch;
            if (typeof v === 'number' && v % 1 === 0) e = v; }
          if (e === null) return; var n = by[e] || (by[e] = [0, 0]); n[cleared[f.finding_id] ? 1 : 0]++; });
        document.querySelectorAll('tr[data-stale-epoch]').forEach(function(tr){
          var n = by[tr.getAttribute('data-stale-epoch')] || [0, 0], td = tr.querySelector('td.stands');
          if (td) td.textContent = n[0] ? n[0] + ' open' + (n[1] ? ' · ' + n[1] + ' cleared' : '') :
            n[1] === 1 ? '1 cleared' : n[1] ? 'all ' + n[1] + ' cleared' : 'no finding';
          tr.className = 'stale-row ' + (n[0] ? 'acting' : 'settled'); });
        var c = document.getElementById('counts');
        if (c) c.textContent = (st.open_count || 0) + ' open · ' + (st.cleared_count || 0) + ' cleared'; }
      } finally { setTimeout(poll, 2000); } };
    x.onerror = function(){ setTimeout(poll, 2000); };
    x.send(); }
  setTimeout(poll, 2000);
})();
"""  # noqa: E501
