"""Draw the layout of ops/grafana/dashboards/claudeq.json as a PNG, from the panels' own definitions (no data).

Run: python ops/grafana/render_layout.py [output.png]   (needs matplotlib, part of the dev extras; default
dashboard-layout.png in the current directory). docs/dashboard.png, the dashboard with data, is drawn by
ops/grafana/snapshot.py (`make dashboard-snapshot`).
Each box is a panel at its grid position, with its title, type, unit and the PromQL it plots.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: render straight to a file
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "claudeq.json"
OUT = Path("dashboard-layout.png")
COLORS = {"timeseries": "#dbe9f6", "stat": "#e3f1df", "bargauge": "#fbeed5", "row": "#3b4252"}
CELL_W, CELL_H = 0.62, 0.42  # inches per grid column and per grid row


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _query_lines(panel: dict[str, Any], width: int) -> list[str]:
    lines: list[str] = []
    for target in panel.get("targets", []):
        expr = target["expr"].replace("[$__rate_interval]", "[…]")
        lines += textwrap.wrap(expr, width=width, subsequent_indent="  ")
    return lines


def render(dashboard: dict[str, Any], out: Path) -> None:
    """Write the layout picture of `dashboard` to `out`."""
    panels = _panels(dashboard)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(24 * CELL_W, rows * CELL_H + 0.8), dpi=90)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 24)
    ax.set_ylim(rows + 1.8, 0)
    ax.axis("off")
    ax.text(0.2, 0.9, f"{dashboard['title']}  (uid {dashboard['uid']})", fontsize=16, weight="bold", va="center")
    top = 1.8
    for panel in panels:
        pos = panel["gridPos"]
        x, y, w, h = pos["x"], pos["y"] + top, pos["w"], pos["h"]
        if panel["type"] == "row":
            ax.add_patch(
                FancyBboxPatch(
                    (x + 0.05, y + 0.1),
                    w - 0.1,
                    h - 0.2,
                    boxstyle="round,pad=0.02",
                    facecolor=COLORS["row"],
                    edgecolor="none",
                )
            )
            ax.text(x + 0.3, y + h / 2, panel["title"], color="white", fontsize=12, weight="bold", va="center")
            continue
        ax.add_patch(
            FancyBboxPatch(
                (x + 0.1, y + 0.1),
                w - 0.2,
                h - 0.2,
                boxstyle="round,pad=0.02",
                facecolor=COLORS.get(panel["type"], "#eeeeee"),
                edgecolor="#7b8794",
            )
        )
        unit = panel["fieldConfig"]["defaults"].get("unit", "")
        ax.text(x + 0.3, y + 0.55, panel["title"], fontsize=11, weight="bold", va="center")
        ax.text(
            x + w - 0.3, y + 0.55, f"{panel['type']} · {unit}", fontsize=8, color="#52606d", va="center", ha="right"
        )
        chars = int(w * 9.5)
        lines = _query_lines(panel, chars)[: max(1, int((h - 1.2) / 0.42))]
        ax.text(
            x + 0.3,
            y + 1.1,
            "\n".join(lines),
            fontsize=7,
            family="monospace",
            color="#243b53",
            va="top",
            linespacing=1.35,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def main() -> None:
    """Render dashboard-layout.png (or the path given)."""
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    render(json.loads(DASHBOARD.read_text()), out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
