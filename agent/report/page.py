"""The furniture every kforge HTML page shares: one self-contained page (inline CSS and a
small script that sorts tables on a click), a table cell with its sort value, and numbers."""

from __future__ import annotations

import html
from typing import Any

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#1d2330;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #dde}
table{border-collapse:collapse;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #dde;padding:3px 8px;text-align:left}th{background:#f1f3f8}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#e2e6f0}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots figure{margin:0}.plots img{width:560px;border:1px solid #dde}
figcaption{font-size:12px;color:#556}.ok{color:#17702f}.bad{color:#a3221b}
pre{background:#f7f7fa;padding:8px;overflow-x:auto;font-size:12px}.small{font-size:12px;color:#556}
details{margin:6px 0}summary{cursor:pointer}
"""

SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function(table){
  table.querySelectorAll('th').forEach(function(th, col){
    th.addEventListener('click', function(){
      var body = table.tBodies[0], rows = Array.from(body.rows), up = th.dataset.up !== '1';
      th.dataset.up = up ? '1' : '0';
      rows.sort(function(a, b){
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v, nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
        return up ? c : -c;
      });
      rows.forEach(function(r){ body.appendChild(r); });
    });
  });
});
"""


def page(title: str, body: list[str]) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
            *body,
            f"<script>{SORT_JS}</script></body></html>",
        ]
    )


def fmt(value: float | None, suffix: str = "x", digits: int = 3) -> str:
    return f"{value:.{digits}f}{suffix}" if value is not None else "-"


def cell(text: Any, sort_value: Any = None, css: str = "", title: str = "") -> str:
    value = text if sort_value is None else sort_value
    attrs = f' data-v="{html.escape(str(value))}"' + (f' class="{css}"' if css else "")
    attrs += f' title="{html.escape(title)}"' if title else ""
    return f"<td{attrs}>{html.escape(str(text))}</td>"
