"""`make dashboard-snapshot`: the Grafana dashboard as an operator sees it, with data, drawn to docs/dashboard.png.

It runs a short simulated workload on a fleet of its own (a private Redis, the simulator with three accounts — one
with a small window and a utilization ceiling, so it is reserved or rate-limited —, three tenants with weights and
spend caps, two workers and the exporter; some jobs with a webhook to a local receiver, and a schedule firing every
few seconds, so the notifications and schedules row has data), lets a real Prometheus scrape it every
second, then evaluates every panel's query over that time range and draws the panels where Grafana lays them out
(timeseries as lines, stats as numbers, bar gauges as bars, with Grafana's units and legends).

Run: python ops/grafana/snapshot.py [--seconds 150] [--out docs/dashboard.png]   (needs the `prometheus` binary:
apt-get install prometheus; matplotlib is a dev extra)
"""

from __future__ import annotations

import argparse
import base64
import http.server
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import matplotlib
import yaml
from pydantic import SecretStr

matplotlib.use("Agg")  # no display: render straight to a file
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "ops"))

import demo  # the demo's process helpers: a private Redis, processes waited for and stopped  # noqa: E402

from claudeq.config.settings import Settings  # noqa: E402
from claudeq.producer.client import Client  # noqa: E402

DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "claudeq.json"
OUT = ROOT / "docs" / "dashboard.png"
ACCOUNTS = ("team-small", "team-a", "team-b")
#: Tenants sharing the fleet: name, weight, spend cap per hour (USD). Most jobs are `batch`'s.
TENANTS = (("default", 1, 20.0), ("support", 3, 5.0), ("batch", 1, 2.0))
RATE_INTERVAL = "30s"  # $__rate_interval for a 1 s scrape over a few minutes
STEP_S = 2

# Grafana's dark theme.
BG, PANEL, GRID, TEXT, MUTED = "#111217", "#181b1f", "#2c3235", "#ccccdc", "#8e8e8e"
PALETTE = ["#73bf69", "#f2cc0c", "#5794f2", "#ff780a", "#f2495c", "#b877d9", "#37872d", "#fade2a", "#1f60c4"]


# ---- the workload ----------------------------------------------------------------------------------------------


def sim_config(path: Path, run_id: str) -> None:
    lines = ["seed = 7", "[latency]", "ttft_s = 0.3", "tokens_per_s = 150", ""]
    for name in ACCOUNTS:
        lines += ["[[accounts]]", f'name = "{name}"', f'token = "{token(name, run_id)}"', 'kind = "oauth"']
        lines += ["[[accounts.windows]]", 'family = "5h"']
        if name == "team-small":
            lines += ["length_s = 30", "requests = 4", "warn_at = 0.5"]
        else:
            lines += ["length_s = 900", "requests = 600", "warn_at = 0.8"]
        lines.append("")
    path.write_text("\n".join(lines))


def token(name: str, run_id: str) -> str:
    return f"sk-ant-oat01-{name}-{run_id}"  # fake: only the simulator knows it


def token_env(name: str) -> str:
    return "SNAP_TOKEN_" + name.split("-")[-1].upper()


def workload_spec(n: int, rng: random.Random, run_id: str) -> dict[str, Any]:
    """The n-th job: a mix of plain answers, tools, structured output, models, transient errors."""
    roll = rng.random()
    out = rng.choice((20, 40, 80, 160))
    base = f"[[sim: tokens out={out}]] job {n} {run_id}"
    if roll < 0.12:
        return {"prompt": f"[[sim: error 529 times=1]] {base}", "max_attempts": 3}
    if roll < 0.17:
        return {"prompt": f"[[sim: error 500 times=1]] {base}", "max_attempts": 3}
    if roll < 0.35:
        return {
            "prompt": f'[[sim: tool mcp__claudeq__order_status {{"order": "A-{n}"}}]] {base}',
            "mcp_tools": ["order_status"],
        }
    if roll < 0.45:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        return {"prompt": f"Check item {n}. {run_id}", "output_schema": schema}
    model = rng.choice(("sonnet", "sonnet", "opus", "haiku"))
    return {"prompt": base, "model": model}


def with_tenant(spec: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The job under one of the tenants: mostly the batch, some support work, a few untagged."""
    tenant = rng.choices([t[0] for t in TENANTS], weights=(1, 3, 6))[0]
    return spec if tenant == "default" else {**spec, "tenant": tenant}


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that takes every delivery (204)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def receiver(stack: ExitStack) -> int:
    """Start a local webhook receiver on a thread; -> its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stack.callback(server.shutdown)
    return int(server.server_address[1])


@dataclass
class Prometheus:
    """A private Prometheus scraping the given targets every second."""

    url: str
    proc: subprocess.Popen[bytes]
    dir: Path

    @classmethod
    def start(cls, targets: dict[str, list[str]], workdir: Path) -> Prometheus:
        binary = shutil.which("prometheus")
        if binary is None:
            raise SystemExit("no `prometheus` binary: apt-get install prometheus")
        folder = workdir / "prom"
        folder.mkdir()
        port = demo._free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": t}]} for job, t in targets.items()],
        }
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=(folder / "log").open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, demo.RUN_VAR: os.environ.get(demo.RUN_VAR, "")},
        )
        prom = cls(f"http://127.0.0.1:{port}", proc, folder)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{prom.url}/-/ready", timeout=2, trust_env=False).status_code == 200:
                    return prom
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"prometheus did not start: {(folder / 'log').read_text()[-2000:]}")
            time.sleep(0.3)

    def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        response = httpx.get(
            f"{self.url}/api/v1/query_range",
            params={"query": expr, "start": start, "end": end, "step": STEP_S},
            timeout=30,
            trust_env=False,
        )
        body = response.json()
        if body.get("status") != "success":
            raise SystemExit(f"{expr}: {body.get('error')}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        demo._stop(self.proc, 15)


# ---- drawing -----------------------------------------------------------------------------------------------------


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def legend(fmt: str | None, metric: dict[str, str]) -> str:
    if not fmt:
        return ", ".join(f"{k}={v}" for k, v in metric.items() if k != "__name__") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip()


def fmt_value(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "percentunit":
        return f"{value * 100:.0f}%"
    if unit == "currencyUSD":
        return f"${value:.3f}" if abs(value) < 10 else f"${value:.2f}"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
    if unit == "ops":
        return f"{value:.2f}/s" if value < 10 else f"{value:.1f}/s"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}K"
    return f"{value:.0f}" if value == int(value) else f"{value:.2f}"


@dataclass
class Series:
    name: str
    times: list[datetime]
    values: list[float]

    @property
    def last(self) -> float:
        return next((v for v in reversed(self.values) if not math.isnan(v)), float("nan"))


def evaluate(prom: Prometheus, panel: dict[str, Any], start: float, end: float) -> list[Series]:
    out: list[Series] = []
    for target in panel.get("targets", []):
        expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", f"{STEP_S}s")
        expr = expr.replace("$__range", f"{int(end - start)}s")
        for row in prom.query_range(expr, start, end):
            times = [datetime.fromtimestamp(float(t), UTC) for t, _ in row["values"]]
            values = [float(v) for _, v in row["values"]]
            out.append(Series(legend(target.get("legendFormat"), row["metric"]), times, values))
    return sorted(out, key=lambda s: s.name)


def draw_timeseries(ax: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    stacked = panel["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode") == "normal"
    if stacked and series:
        times = sorted({t for s in series for t in s.times})
        base = [0.0] * len(times)
        for i, s in enumerate(series):
            lookup = dict(zip(s.times, s.values, strict=True))
            top = [
                b + (lookup.get(t, 0.0) if not math.isnan(lookup.get(t, 0.0)) else 0.0)
                for b, t in zip(base, times, strict=True)
            ]
            colour = PALETTE[i % len(PALETTE)]
            ax.fill_between(times, base, top, color=colour, alpha=0.25, linewidth=0)
            ax.plot(times, top, color=colour, linewidth=1.2, label=f"{s.name}  {fmt_value(s.last, unit)}")
            base = top
    else:
        for i, s in enumerate(series):
            colour = PALETTE[i % len(PALETTE)]
            ax.plot(s.times, s.values, color=colour, linewidth=1.3, label=f"{s.name}  {fmt_value(s.last, unit)}")
    ax.set_facecolor(PANEL)
    ax.grid(color=GRID, linewidth=0.6)
    ax.tick_params(colors=MUTED, labelsize=7)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.xaxis.set_major_locator(mdates.MinuteLocator())
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: fmt_value(v, unit)))
    ax.set_ylim(bottom=0)
    if series:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=7,
            frameon=False,
            labelcolor=TEXT,
            handlelength=1.2,
        )
    else:
        ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)


def draw_values(ax: Axes, panel: dict[str, Any], series: list[Series], unit: str) -> None:
    """stat: big last values; bargauge: horizontal bars of the last values (of the series present at the end)."""
    end = max((s.times[-1] for s in series if s.times), default=None)
    series = [s for s in series if s.times and s.times[-1] == end]
    ax.set_facecolor(PANEL)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if not series:
        ax.text(0.5, 0.5, "No data", color=MUTED, ha="center", va="center", transform=ax.transAxes)
        return
    if panel["type"] == "bargauge":
        top = max((s.last for s in series if not math.isnan(s.last)), default=1.0) or 1.0
        n = len(series)
        for i, s in enumerate(series):
            y = 1 - (i + 0.5) / n
            width = 0.0 if math.isnan(s.last) else 0.62 * s.last / top
            ax.add_patch(
                Rectangle((0.3, y - 0.3 / n), width, 0.6 / n, color=PALETTE[i % len(PALETTE)], transform=ax.transAxes)
            )
            ax.text(0.27, y, s.name, color=TEXT, ha="right", va="center", fontsize=8, transform=ax.transAxes)
            ax.text(
                0.31 + width, y, fmt_value(s.last, unit), color=TEXT, va="center", fontsize=8, transform=ax.transAxes
            )
        return
    n = len(series)
    cols = min(n, 2 if n > 3 else n)
    rows = math.ceil(n / cols)
    for i, s in enumerate(series):
        cx = (i % cols + 0.5) / cols
        cy = 1 - (i // cols + 0.5) / rows
        colour = PALETTE[i % len(PALETTE)]
        value = fmt_value(s.last, unit) if not panel["title"].startswith("Account state") else s.name.split(": ")[-1]
        name = s.name if not panel["title"].startswith("Account state") else s.name.split(": ")[0]
        if panel["title"].startswith("Account state"):
            colour = {
                "ok": "#73bf69",
                "warning": "#f2cc0c",
                "cooling": "#5794f2",
                "reserved": "#b877d9",
                "disabled": "#f2495c",
            }.get(value, colour)
        ax.text(
            cx,
            cy + 0.06,
            value,
            color=colour,
            ha="center",
            va="center",
            fontsize=15 if n <= 4 else 12,
            weight="bold",
            transform=ax.transAxes,
        )
        ax.text(cx, cy - 0.12, name, color=MUTED, ha="center", va="center", fontsize=7, transform=ax.transAxes)


def render(prom: Prometheus, dashboard: dict[str, Any], start: float, end: float, out: Path) -> None:
    items = panels(dashboard)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in items)
    unit_w, unit_h = 0.72, 0.36  # inches per grid column / row
    header = 0.9
    fig = plt.figure(figsize=(24 * unit_w, rows * unit_h + header), dpi=80, facecolor=BG)
    total_h = rows * unit_h + header

    def box(x: float, y: float, w: float, h: float) -> tuple[float, float, float, float]:
        left = x * unit_w / (24 * unit_w)
        bottom = 1 - (header + (y + h) * unit_h) / total_h
        return (left, bottom, w * unit_w / (24 * unit_w), h * unit_h / total_h)

    span = f"{datetime.fromtimestamp(start, UTC):%H:%M:%S} – {datetime.fromtimestamp(end, UTC):%H:%M:%S} UTC"
    fig.text(
        0.006,
        1 - 0.45 / total_h,
        f"{dashboard['title']}   ·   simulated workload, scraped by Prometheus every 1 s   ·   {span}",
        color=TEXT,
        fontsize=14,
        weight="bold",
        va="center",
    )
    for panel in items:
        pos = panel["gridPos"]
        if panel["type"] == "row":
            ax = fig.add_axes(box(pos["x"], pos["y"], pos["w"], pos["h"]))
            ax.axis("off")
            ax.text(0.004, 0.45, f"▾ {panel['title']}", color=TEXT, fontsize=12, weight="bold", va="center")
            continue
        frame = fig.add_axes(box(pos["x"] + 0.06, pos["y"] + 0.06, pos["w"] - 0.12, pos["h"] - 0.12))
        frame.set_xticks([])
        frame.set_yticks([])
        frame.set_facecolor(PANEL)
        for spine in frame.spines.values():
            spine.set_color(GRID)
        frame.text(
            0.015,
            1 - 0.35 / (pos["h"] * 1.0),
            panel["title"],
            color=TEXT,
            fontsize=9,
            weight="bold",
            va="center",
            transform=frame.transAxes,
        )
        unit = panel["fieldConfig"]["defaults"].get("unit", "")
        series = evaluate(prom, panel, start, end)
        if panel["type"] == "timeseries":
            legend_w = 0.36 if pos["w"] <= 9 else 0.26
            ax = fig.add_axes(box(pos["x"] + 0.7, pos["y"] + 1.0, pos["w"] * (1 - legend_w) - 0.6, pos["h"] - 1.9))
            draw_timeseries(ax, panel, series, unit)
        else:
            ax = fig.add_axes(box(pos["x"] + 0.2, pos["y"] + 0.9, pos["w"] - 0.4, pos["h"] - 1.1))
            draw_values(ax, panel, series, unit)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, facecolor=BG)
    plt.close(fig)


# ---- main ---------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=150.0, help="How long the workload runs.")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    run_id = os.urandom(4).hex()
    workdir = Path(tempfile.mkdtemp(prefix="claudeq-snapshot-"))
    base = {**os.environ, demo.RUN_VAR: run_id}
    rng = random.Random(7)
    prefix, queue = f"claudeq-snap-{run_id}:", f"claudeq-snap-{run_id}"
    with ExitStack() as stack:
        redis_url = stack.enter_context(demo._redis(workdir, base))
        sim_config(workdir / "sim.toml", run_id)
        sim_line = stack.enter_context(
            demo._process(
                "simulator",
                [sys.executable, "-m", "claudeq.simulator", "--port", "0", "--config", str(workdir / "sim.toml")],
                base,
                workdir / "simulator.log",
                "listening on",
            )
        )
        sim_url = sim_line.split("listening on", 1)[1].strip()
        accounts = workdir / "accounts.toml"
        accounts.write_text(
            "".join(
                f'[[accounts]]\nname = "{n}"\nkind = "oauth"\ntoken_env = "{token_env(n)}"\n'
                f'max_concurrency = {2 if n == "team-small" else 3}\nbase_url = "{sim_url}"\n'
                # The small account keeps half of its window for people: it shows as reserved once it reaches that.
                + ("utilization_ceiling = 0.5\n\n" if n == "team-small" else "\n")
                for n in ACCOUNTS
            )
        )
        tenants = workdir / "tenants.toml"
        tenants.write_text(
            "allow_unknown = false\n"
            + "".join(
                f'[[tenants]]\nname = "{name}"\nweight = {weight}\nmax_cost_usd_per_hour = {cap}\n\n'
                for name, weight, cap in TENANTS
            )
        )
        hook_port = receiver(stack)
        secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
        hooks = {
            "CLAUDEQ_WEBHOOK_HOSTS": "127.0.0.1",
            "CLAUDEQ_WEBHOOK_PORTS": str(hook_port),
            "CLAUDEQ_WEBHOOK_ALLOW_NETS": "127.0.0.0/8",
            "CLAUDEQ_WEBHOOK_SECRET": secret,
        }
        env = {
            **base,
            **hooks,
            "CLAUDEQ_REDIS_URL": redis_url,
            "CLAUDEQ_KEY_PREFIX": prefix,
            "CLAUDEQ_QUEUE": queue,
            "CLAUDEQ_QUEUES": json.dumps([queue]),
            "CLAUDEQ_ACCOUNTS_FILE": str(accounts),
            "CLAUDEQ_TENANTS_FILE": str(tenants),
            "CLAUDEQ_RUN_ROOT": str(workdir / "runs"),
            "CLAUDEQ_CONCURRENCY": "4",
            "CLAUDEQ_RETRY_BASE_S": "0.5",
            "CLAUDEQ_RETRY_MAX_S": "3",
            "CLAUDEQ_SHUTDOWN_GRACE_S": "5",
            "CLAUDEQ_POLICY__MCP_TOOLS_MODULE": "demo_tools",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "ops"), base.get("PYTHONPATH", "")) if p),
            **{token_env(n): token(n, run_id) for n in ACCOUNTS},
        }
        targets: list[str] = []
        for n in (1, 2):
            port = demo._free_port()
            targets.append(f"127.0.0.1:{port}")
            stack.enter_context(
                demo._process(
                    f"worker-{n}",
                    [sys.executable, "-m", "claudeq.worker.main"],
                    {**env, "CLAUDEQ_WORKER_ID": f"worker-{n}", "CLAUDEQ_METRICS_PORT": str(port)},
                    workdir / f"worker-{n}.log",
                    " ready.",
                )
            )
        exporter_port = demo._free_port()
        stack.enter_context(
            demo._process(
                "exporter",
                [
                    sys.executable,
                    "-m",
                    "claudeq.producer.cli",
                    "exporter",
                    "--port",
                    str(exporter_port),
                    "--addr",
                    "127.0.0.1",
                ],
                env,
                workdir / "exporter.log",
                "serving /metrics",
            )
        )
        prom = Prometheus.start({"workers": targets, "exporter": [f"127.0.0.1:{exporter_port}"]}, workdir)
        stack.callback(prom.stop)
        settings = Settings(
            _env_file=None,
            redis_url=redis_url,
            key_prefix=prefix,
            queue=queue,
            queues=[queue],
            tenants_file=tenants,
            webhook_hosts=["127.0.0.1"],
            webhook_ports=[hook_port],
            webhook_allow_nets=["127.0.0.0/8"],
            webhook_secret=SecretStr(secret),
        )
        client = Client(settings)
        stack.callback(client.close)
        print(f"fleet up: 2 workers, exporter, Prometheus at {prom.url}; workload for {args.seconds:.0f} s", flush=True)
        client.add_schedule("snapshot-tick", {"prompt": f"[[sim: tokens out=20]] scheduled {run_id}"}, every_s=5)
        start = time.time()
        n = 0
        while time.time() - start < args.seconds:
            phase = (time.time() - start) / args.seconds
            # A swell in the middle, above what the accounts' slots can run: queues build, the small account runs
            # out and is routed around, then everything drains.
            per_s = 0.2 + 0.9 * math.sin(math.pi * phase) ** 2
            n += 1
            spec = with_tenant(workload_spec(n, rng, run_id), rng)
            if n % 8 == 0:  # its end is POSTed to the receiver
                spec["webhook"] = {"url": f"http://127.0.0.1:{hook_port}/hook"}
            handle = client.submit(spec)
            if rng.random() < 0.03:
                client.cancel(handle.id)
            time.sleep(rng.expovariate(per_s))
        client.remove_schedule("snapshot-tick")
        settle = time.time()
        while time.time() - settle < 90 and (
            client.store.redis.scard(client.store.keys.running) or client.store.redis.zcard(client.store.keys.queued)
        ):
            time.sleep(1)
        end = time.time()
        print(f"submitted {n} jobs; drawing {len(panels(json.loads(DASHBOARD.read_text())))} panels", flush=True)
        render(prom, json.loads(DASHBOARD.read_text()), start - 10, end, args.out)
        print(f"wrote {args.out}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
