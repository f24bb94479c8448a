"""report.html's style sheet (and `lab compare --html`'s): one place for how the pages look."""
from __future__ import annotations

# The seeds' quotes are Chinese: the CJK fonts a reader's system may have, by name, before the generic family (a box with
# none draws boxes: Debian/Ubuntu `apt install fonts-noto-cjk`; every quote has its English `claim` beside it).
FONTS_CJK = '"Noto Sans CJK SC","Source Han Sans SC","PingFang SC","Hiragino Sans GB","Microsoft YaHei","WenQuanYi Micro Hei"'
# Commands and code wrap only at spaces (lab.core.display.code_html: a flag broken at its "-" is typed wrong), so no
# <pre> needs sideways scrolling; the contents list takes two columns only where each is 20rem wide, with a gap that
# holds the second column's numbers (at 800 px they lay over the first column's text).
CSS = """
html{overflow-x:hidden}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,"Noto Sans",FONTS_CJK,sans-serif;margin:1.2rem auto;max-width:1200px;color:#222;
     padding:0 1rem;line-height:1.4}
h1{margin:.2rem 0;font-size:1.6rem} h2{border-bottom:2px solid #ddd;padding-bottom:.2rem;margin-top:2.2rem}
h3{margin-top:1.4rem} h4{margin:.8rem 0 .2rem} details.why{font-size:.85rem;color:#444}
.badge{color:#fff;border-radius:3px;padding:0 .4rem;font-weight:600}
.meta{color:#555;font-size:.85rem} .err{color:#d62728;white-space:pre-wrap;font-family:monospace;overflow-wrap:anywhere}
code{background:#f4f4f4;padding:0 .2rem}
pre{background:#f6f8fa;padding:.5rem;overflow-x:auto;max-width:100%}
.answer{background:#f3f8ff;border:1px solid #cfe0f5;border-radius:6px;padding:.2rem 1rem .6rem;margin:.6rem 0 1rem}
.answer table,.closing table{border-collapse:collapse;font-size:.85rem}
.answer th,.answer td,.closing th,.closing td{border:1px solid #ccd;padding:.2rem .4rem;text-align:left;vertical-align:top}
.answer td:last-child{white-space:nowrap}
.tablebox{overflow-x:auto;max-width:100%}
.closing{background:#fafafa;border-left:4px solid #1f77b4;padding:.2rem .9rem;margin:.6rem 0}
nav ol{columns:2 20rem;column-gap:3rem;font-size:.95rem} nav li{break-inside:avoid} .skipline{color:#666;font-size:.88rem}
details>summary{cursor:pointer;color:#1f4f8f} details.table{margin:.35rem 0} details.table>summary{font-weight:600}
.js-plotly-plot,.plotly-graph-div{max-width:100%}
pre.cmd{white-space:pre-wrap;margin:0;padding:.12rem .5rem;border-top:1px solid #fff} .chartline{margin:.5rem 0}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(540px,1fr));gap:0 1rem} .chart{min-width:0}
""".replace("FONTS_CJK", FONTS_CJK)
