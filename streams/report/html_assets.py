"""The HTML report's inline style sheet and script (no network: both are
written into the page). Severity colours are the CSS variables ``--crit``,
``--inc``, ``--warn`` and ``--diag``, used by every badge, pill and ring."""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
:root{--crit:#c5221f;--inc:#e8710a;--warn:#f9ab00;--diag:#1a73e8;--ok:#188038;
--ink:#1f2328;--muted:#5f6773;--line:#e2e5ea;--bg:#f6f7f9;--card:#fff;--lh:26px;--cw:26px}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",sans-serif;
color:var(--ink);background:var(--bg)}
main{max-width:1320px;margin:0 auto;padding:28px 32px 64px}
h1{font-size:22px;font-weight:650;margin:0 0 4px}
h2{font-size:16px;font-weight:650;margin:32px 0 10px}
h3{font-size:15px;font-weight:650;margin:0;word-break:break-all}
a{color:#0b57d0;text-decoration:none} a:hover{text-decoration:underline}
.muted{color:var(--muted)} .num{font-variant-numeric:tabular-nums;text-align:right}
.sub{color:var(--muted);margin:0 0 20px}
.banner{border-radius:8px;padding:10px 14px;margin:0 0 16px;font-weight:600}
.banner.partial{background:#fff4e5;border:1px solid #f3b26b;color:#8a4b00}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(200px,1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 16px}
.card .k{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:24px;font-weight:650;font-variant-numeric:tabular-nums}
.card .d{color:var(--muted);font-size:13px}
/* A table wider than a narrow window scrolls inside its box, never the page
   (and is never clipped). */
.panel{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:4px 0;
overflow-x:auto}
.tscroll{overflow-x:auto}
table{border-collapse:collapse;width:100%}
th,td{padding:7px 12px;text-align:left;vertical-align:top;border-bottom:1px solid var(--line)}
tr:last-child td{border-bottom:0}
th{font-size:12px;font-weight:600;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
td.key{overflow-wrap:anywhere;min-width:12em} td.nw,th.nw{white-space:nowrap}
.sev{display:inline-block;border-radius:4px;padding:1px 7px;font-size:12px;font-weight:650;
color:#fff;white-space:nowrap}
.sev.critical{background:var(--crit)} .sev.incident{background:var(--inc)}
.sev.warning{background:var(--warn);color:#3d2b00} .sev.diagnostic{background:var(--diag)}
.cnt-crit{color:var(--crit);font-weight:650} .cnt-inc{color:var(--inc);font-weight:650}
.cnt-warn{color:#a06b00;font-weight:650} .cnt-diag{color:var(--diag);font-weight:650}
.zero{color:#c3c8cf}
.pill{display:inline-block;border-radius:999px;padding:0 8px;font-size:12px;font-weight:600;
border:1px solid;white-space:nowrap}
.pill.open{color:var(--crit);border-color:#f1b5b0;background:#fdf0ef}
.pill.cleared{color:var(--ok);border-color:#b7dfc2;background:#eff8f1}
.pill.high{color:var(--ink);border-color:#c9ced6} .pill.medium{color:#8a5a00;border-color:#f0d08a}
.pill.low{color:var(--muted);border-color:var(--line);background:#f3f4f6}
.pill.ignores_fence{color:var(--crit);border-color:#f1b5b0;background:#fdf0ef}
.pill.enforces_fence{color:var(--ok);border-color:#b7dfc2;background:#eff8f1}
.pill.unproven{color:var(--muted);border-color:var(--line)}
details.clean{margin-top:10px} details.clean summary{cursor:pointer;color:var(--muted)}
.cleanlist{columns:3 280px;margin:8px 0 0;padding:0 0 0 18px;word-break:break-all}
.wf{background:var(--card);border:1px solid var(--line);border-radius:10px;margin:18px 0;
padding:16px 18px}
.wf-head{display:flex;gap:12px;align-items:baseline;flex-wrap:wrap;margin-bottom:10px}
.wf table td{font-size:13px} tr:target td{background:#fff8d6}
.action{color:var(--muted);font-size:12.5px}
.legend{display:flex;flex-wrap:wrap;gap:14px;align-items:center;color:var(--muted);font-size:12.5px;
margin:6px 0 0}
.legend span{display:inline-flex;align-items:center;gap:5px;white-space:nowrap}
.legend .ev{position:static;transform:none}
.tl{margin:4px 0 14px;padding-bottom:10px;border-bottom:1px solid var(--line)}
.tl-tools{display:flex;gap:6px;align-items:center;margin-bottom:6px;font-size:12.5px;
color:var(--muted)}
.tl-tools button{font:inherit;color:var(--ink);background:#fff;border:1px solid #cdd2d9;
border-radius:6px;padding:1px 9px;cursor:pointer;white-space:nowrap}
.tl-tools button:hover{background:#f1f3f6}
.tl-tools .sp{flex:1}
.tl-scroll{overflow-x:auto;overflow-y:hidden;position:relative}
.tl-body{display:flex;min-width:0}
.labels{flex:0 0 170px;position:sticky;left:0;z-index:3;background:var(--card);
border-right:1px solid var(--line)}
.labels>div{height:var(--lh);display:flex;align-items:center;gap:6px;padding-right:8px;
white-space:nowrap;overflow:hidden;font-size:12px}
.labels .lab-f{height:var(--fh);color:var(--muted);font-size:11px;align-items:flex-end;
padding-bottom:3px}
.labels .lab-p{height:22px;color:var(--muted);font-size:11px}
.lane-label b{font-weight:650;font-variant-numeric:tabular-nums}
.lane-label small{color:var(--muted);font-size:11.5px;overflow:hidden;text-overflow:ellipsis}
.cols{flex:1 1 auto;min-width:0;display:flex;position:relative;
height:calc(var(--fh) + var(--lanes) * var(--lh) + 22px)}
.lane{position:absolute;left:0;right:0;height:var(--lh);border-bottom:1px solid #eef0f3}
.lane.alt{background:#fafbfc}
.col{position:relative;flex:0 1 var(--cw);min-width:0;height:100%}
.col.hit{min-width:22px} .tl.dense .col.hit{min-width:15px}
.tl.dense .fmark{min-width:14px;height:14px;line-height:14px;font-size:8.5px;padding:0;
border-radius:3px} .tl.dense .fmark.cleared{line-height:11px}
.tl.dense .sum{min-width:0} .tl.dense .sum .n{font-size:0;padding:0 2px}
.tl.dense .ev{width:13px;height:13px;line-height:13px;font-size:8px}
.tl.free .col{flex-shrink:0}
/* Expanded: the body is as wide as its columns, so the sticky lane labels
   stay in view however far the timeline scrolls. */
.tl.free .tl-body{width:max-content;min-width:100%}
.tl.free .cols{flex:none;min-width:calc(100% - 170px)}
.col.acq::before{content:"";position:absolute;left:0;top:var(--fh);bottom:22px;
border-left:1px dashed #9aa3ad}
.col.hit{flex-basis:calc(var(--cw) + 10px);
background:linear-gradient(#fff6e0,#fff6e0) no-repeat 0 var(--fh)/100%
calc(var(--lanes) * var(--lh))}
.fc{position:absolute;top:0;left:0;right:0;height:var(--fh);display:flex;flex-direction:column;
justify-content:flex-end;align-items:center;gap:2px;padding-bottom:3px}
.fmark{display:block;min-width:20px;height:16px;border-radius:4px;font-size:10.5px;
font-weight:700;line-height:16px;text-align:center;color:#fff;padding:0 3px;z-index:2}
.fmark:hover{text-decoration:none;filter:brightness(1.1)}
.fmark.critical{background:var(--crit)} .fmark.incident{background:var(--inc)}
.fmark.warning{background:var(--warn);color:#3d2b00} .fmark.diagnostic{background:var(--diag)}
.fmark.cleared{background:#fff;border:1.5px solid currentColor;line-height:13px}
.fmark.cleared.critical{color:var(--crit)} .fmark.cleared.incident{color:var(--inc)}
.fmark.cleared.warning{color:#a06b00} .fmark.cleared.diagnostic{color:var(--diag)}
.ev{position:absolute;left:50%;transform:translate(-50%,5px);width:16px;height:16px;
border-radius:50%;font:700 9.5px/16px ui-monospace,SFMono-Regular,Menlo,monospace;
text-align:center;color:#fff;background:#8a939e}
.ev.ring{box-shadow:0 0 0 2px #fff,0 0 0 4px var(--ring)}
.t-lease_acquired{background:#188038}.t-lease_acquired::after{content:"A"}
.t-lease_released{background:#9aa0a6}.t-lease_released::after{content:"R"}
.t-progress{background:#b7bfc9}.t-progress::after{content:"p"}
.t-effect_attempted{background:#7b3fb5}.t-effect_attempted::after{content:"a"}
.t-effect_committed{background:#202124}.t-effect_committed::after{content:"C"}
.t-effect_rejected{background:#00838f}.t-effect_rejected::after{content:"x"}
.t-outcome_verified{background:#1a73e8}.t-outcome_verified::after{content:"V"}
.t-other::after{content:"?"}
.run{display:contents}
.run>.det{display:none} .run.open>.det{display:contents} .run.open>.sum{display:none}
.sum{cursor:pointer;border:0;padding:0;background:transparent;font:inherit;min-width:22px;
flex-basis:calc(var(--cw) + 8px)}
.sum:hover{background:#eef2f7}
.sum .n{position:absolute;left:50%;transform:translate(-50%,6px);font-size:10px;line-height:14px;
color:#4d5560;background:#eceff3;border:1px solid #d5dae1;border-radius:7px;padding:0 4px;
white-space:nowrap;font-variant-numeric:tabular-nums}
.sum.capped .n{border-style:dashed}
.pos{position:absolute;bottom:0;left:50%;transform:translateX(-50%);height:22px;line-height:22px;
font-size:10.5px;color:var(--muted);white-space:nowrap;font-variant-numeric:tabular-nums}
.hit .pos{color:var(--ink);font-weight:650}
.note{font-size:12.5px;color:var(--muted);margin:6px 0 0}
footer{margin-top:40px;color:var(--muted);font-size:12px}
.banner .d,.banner ul{font-weight:400;margin:4px 0 0}
.banner.missing{background:#fdf0ef;border:1px solid #f1b5b0;color:#8c1d18}
.hnote{color:#8a5a00;font-size:12px;margin-top:3px}
.left-out{font-weight:600}
/* Paged tables: drawn from the embedded data a page at a time. */
.pager-tools{display:flex;gap:8px;align-items:center;flex-wrap:wrap;padding:6px 12px;
font-size:12.5px;color:var(--muted)}
.pager-tools .sp{flex:1}
.pager-tools input{font:inherit;color:var(--ink);padding:2px 8px;border:1px solid #cdd2d9;
border-radius:6px;flex:0 1 260px;min-width:0}
.pager-tools button{font:inherit;color:var(--ink);background:#fff;border:1px solid #cdd2d9;
border-radius:6px;padding:1px 9px;cursor:pointer}
.pager-tools button:disabled{color:#c3c8cf;cursor:default}
.pg{display:inline-flex;gap:6px;align-items:center;white-space:nowrap}
/* The paged tables' many columns: tighter cells, so they fit down to the
   card width. */
.paged th,.paged td{padding-left:8px;padding-right:8px}
.paged td.key{min-width:10em}
@media (max-width:720px){main{padding:18px 12px 48px}.wf{padding:12px 10px}}
/* Narrow: columns keep room for their marks and the timeline scrolls inside
   itself (lane labels stay), rather than drawing marks over each other. */
@media (max-width:940px){.col{min-width:18px}.col.hit{min-width:24px}.sum{min-width:26px}}
/* Narrow: a table stacks into one card per row, each cell under its
   column's name (data-l), rather than scrolling sideways. */
@media (max-width:940px){
table.cardable,table.cardable tbody,table.cardable tr,table.cardable td{display:block;width:auto}
table.cardable thead,table.cardable tr:has(>th){display:none}
table.cardable tr{border-bottom:1px solid var(--line);padding:6px 0}
table.cardable tr:last-child{border-bottom:0}
table.cardable td{border:0;position:relative;padding:2px 12px 2px 160px;
min-width:0;text-align:left;white-space:normal;overflow-wrap:anywhere}
table.cardable td::before{content:attr(data-l);position:absolute;left:12px;width:142px;
color:var(--muted);font-size:11px;font-weight:600;line-height:20px;text-transform:uppercase;
letter-spacing:.02em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
}
/* Wide enough for two fields a line: the cards pair them (a key or a
   sentence keeps a whole line). */
@media (min-width:561px) and (max-width:940px){
table.cardable tr{display:grid;grid-template-columns:1fr 1fr}
table.cardable td.key,table.cardable td.what{grid-column:1/-1}
}
"""

# Inline, no network: expand a run, expand all, back to fit, zoom; the paged
# tables (overview, other findings) drawn from the embedded data (fw-data,
# see streams.report.html._data), a page at a time, with a filter.
JS = """
(function(){
var el=document.getElementById('fw-data');if(!el)return;
var D=JSON.parse(el.textContent),S=D.s,SEV=D.sev,N=D.rows||50;
var CNT=['cnt-crit','cnt-inc','cnt-warn','cnt-diag'];
function fmt(n){return Number(n).toLocaleString('en-US');}
function cell(tr,label,cls){var td=document.createElement('td');td.setAttribute('data-l',label);
if(cls)td.className=cls;tr.appendChild(td);return td;}
function span(cls,text,title){var s=document.createElement('span');s.className=cls;
s.textContent=text;if(title)s.title=title;return s;}
function wfRow(r){var tr=document.createElement('tr');var a=document.createElement('a');
a.textContent=r[0];if(r[10]){a.href='#'+r[10];}else{a.href='#others';a.setAttribute('data-pick',r[0]);
a.title='show its findings';}
cell(tr,'workflow','key').appendChild(a);
cell(tr,'worst').appendChild(span('sev '+SEV[r[1]],SEV[r[1]]));
for(var i=0;i<4;i++){cell(tr,SEV[i],'num '+(r[2+i]?CNT[i]:'zero')).textContent=fmt(r[2+i]);}
cell(tr,'open','num').textContent=fmt(r[6]);cell(tr,'cleared','num').textContent=fmt(r[7]);
cell(tr,'events','num').textContent=fmt(r[8]);cell(tr,'epochs','num').textContent=fmt(r[9]);
return tr;}
function fRow(r){var tr=document.createElement('tr');
cell(tr,'workflow','key').textContent=D.wf[r[0]][0];
cell(tr,'#','nw muted').textContent=r[1];
cell(tr,'severity').appendChild(span('sev '+SEV[r[2]],SEV[r[2]]));
cell(tr,'kind','nw').textContent=S[r[3]];cell(tr,'at','nw').textContent=r[4];
var w=cell(tr,'what happened','what');w.appendChild(document.createTextNode(r[5]));
var ac=document.createElement('div');ac.className='action';ac.textContent=S[r[6]];w.appendChild(ac);
var note=r[10]>=0?S[r[10]]:'';
var c=cell(tr,'confidence');c.appendChild(span('pill '+r[7],r[7],S[r[8]]+(note?'; '+note:'')));
if(note){var h=document.createElement('div');h.className='hnote';h.textContent=note;
c.appendChild(h);}
cell(tr,'status').appendChild(span('pill '+r[9],r[9]));return tr;}
var T={wf:{rows:D.wf,key:function(r){return r[0];},row:wfRow},
f:{rows:D.f,key:function(r){return D.wf[r[0]][0];},row:fRow}};
var pagers={};
document.querySelectorAll('.paged').forEach(function(box){
var t=T[box.getAttribute('data-table')];if(!t)return;
var st={page:0,q:'',rows:t.rows},body=box.querySelector('tbody'),pg=box.querySelector('.pg'),
input=box.querySelector('input');
function btn(label,to,off){var b=document.createElement('button');b.textContent=label;
b.disabled=off;b.onclick=function(){st.page=to;draw();};return b;}
if(t.rows.length<=N)box.querySelector('.pager-tools').style.display='none';
function draw(){var rows=st.rows,n=rows.length,pages=Math.max(1,Math.ceil(n/N));
if(st.page>=pages)st.page=pages-1;var a=st.page*N,b=Math.min(n,a+N);
var frag=document.createDocumentFragment();
for(var i=a;i<b;i++)frag.appendChild(t.row(rows[i]));
body.textContent='';body.appendChild(frag);pg.textContent='';
pg.appendChild(btn('\u2039 prev',st.page-1,st.page===0));
pg.appendChild(document.createTextNode(n?'rows '+fmt(a+1)+'\u2013'+fmt(b)+' of '+fmt(n):
(st.q?'no row matches':'no rows')));
pg.appendChild(btn('next \u203a',st.page+1,st.page>=pages-1));}
function filter(q,exact){st.q=q;st.page=0;st.rows=q?t.rows.filter(function(r){
var k=t.key(r);return exact?k===q:k.indexOf(q)>=0;}):t.rows;draw();}
input.addEventListener('input',function(){filter(input.value,false);});
pagers[box.getAttribute('data-table')]={pick:function(q){input.value=q;filter(q,true);}};
draw();});
document.addEventListener('click',function(e){var a=e.target.closest('a[data-pick]');
if(a&&pagers.f)pagers.f.pick(a.getAttribute('data-pick'));});
})();
function expand(r){var tp=r.querySelector(':scope>template');
if(tp){var d=document.createElement('div');d.className='det';d.appendChild(tp.content);
tp.replaceWith(d);}r.classList.add('open');}
document.addEventListener('click',function(e){
var t=e.target.closest('[data-act]');if(!t)return;var tl=t.closest('.tl');if(!tl)return;
var a=t.getAttribute('data-act');
if(a==='run'){expand(t.parentNode);tl.classList.add('free');}
else if(a==='all'){tl.querySelectorAll('.run[data-x]').forEach(expand);tl.classList.add('free');}
else if(a==='fit'){tl.querySelectorAll('.run.open').forEach(function(r){
r.classList.remove('open')});tl.classList.remove('free');
tl.style.setProperty('--cw',tl.getAttribute('data-cw')+'px');}
else if(a==='in'||a==='out'){var c=parseFloat(getComputedStyle(tl).getPropertyValue('--cw'))||26;
c=a==='in'?Math.min(72,c*1.5):Math.max(6,c/1.5);tl.style.setProperty('--cw',c+'px');
tl.classList.add('free');}
});
"""
