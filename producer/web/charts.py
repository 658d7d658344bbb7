"""The fleet page's pictures (docs/web.md#the-fleet-in-pictures), read from what Redis already counts: no
Prometheus needed, and each figure is the counter's own value.

- jobs finished per hour by status: the finished-jobs counters (`Keys.finished_counts`), which count each job under
  the hour its retention ends: shifted back by `result_ttl_s`; per minute over the last hour: the newest jobs'
  records `claudeq top` reads anyway;
- cost per hour by tenant and by account: the spend hashes the runs' ends write (`h:<epoch hour>` -> dollars);
- per account: slots in use, each rate-limit window's utilization and reset, the rate-limit signals counted
  (`rejected`, `warnings`);
- per minute over the last hours, by account: rate-limit signals and slots in use, from the accounts' per-minute
  history (`Keys.account_history`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis

from claudeq.accounts import HISTORY_COUNTERS, HISTORY_HOURS
from claudeq.jobs import FINISHED
from claudeq.keys import Keys
from claudeq.models import AccountState

#: How many hours the charts go back (the spend hashes keep two days).
HOURS = 24
#: Geometry of a chart (SVG user units; it scales to the page).
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 1000.0, 120.0, 60.0, 20.0, 10.0


@dataclass(frozen=True)
class Segment:
    """One series' part of one bucket's bar."""

    series: str
    bucket: int  # epoch hour
    value: float
    x: float
    y: float
    w: float
    h: float
    title: str


@dataclass
class Chart:
    """Stacked bars over the last hours: one series per status / tenant / account."""

    id: str
    title: str
    unit: str  # "jobs", "$", "signals" or "slots"
    series: list[str]
    buckets: list[int]
    values: dict[str, list[float]]
    bucket_s: int = 3600  # a bucket's length: an hour, or a minute
    segments: list[Segment] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)
    top: float = 0.0

    @property
    def total(self) -> float:
        """The sum of every value drawn."""
        return sum(sum(v) for v in self.values.values())


def _number(value: bytes | str | None) -> float:
    try:
        return float(value or 0)
    except ValueError:
        return 0.0  # a damaged counter draws as nothing rather than failing the page


def _label(bucket: int, bucket_s: int = 3600) -> str:
    return datetime.fromtimestamp(bucket * bucket_s, UTC).strftime("%H:%M")


def _layout(chart: Chart) -> Chart:
    totals = [sum(chart.values[s][i] for s in chart.series) for i in range(len(chart.buckets))]
    chart.top = max(totals, default=0.0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(chart.buckets), 1)
    for i, bucket in enumerate(chart.buckets):
        base = HEIGHT - BOTTOM
        for name in chart.series:
            value = chart.values[name][i]
            if value <= 0:
                continue
            h = value / chart.top * plot_h
            shown = f"${value:.4f}" if chart.unit == "$" else f"{value:g} {chart.unit}"
            title = f"{name}, {_label(bucket, chart.bucket_s)}–{_label(bucket + 1, chart.bucket_s)} UTC: {shown}"
            x = round(LEFT + i * slot + 1, 2)
            chart.segments.append(
                Segment(name, bucket, value, x, round(base - h, 2), round(slot - 2, 2), round(h, 2), title)
            )
            base -= h
        if i % (3 if chart.bucket_s == 3600 else max(10, len(chart.buckets) // 12)) == 0:
            chart.ticks.append((round(LEFT + i * slot + slot / 2, 2), _label(bucket, chart.bucket_s)))
    return chart


def finished_per_hour(client: redis.Redis, keys: Keys, now: float, result_ttl_s: int) -> Chart:
    """Jobs finished per hour by status over the last HOURS hours."""
    current = int(now // 3600)
    buckets = list(range(current - HOURS + 1, current + 1))
    shift = result_ttl_s // 3600 + 1  # count_finished.lua: the field is the hour the retention ends, plus one
    pipe = client.pipeline(transaction=False)
    for status in FINISHED:
        pipe.hmget(keys.finished_counts(status), [str(b + shift) for b in buckets])
    values = {status: [_number(v) for v in row] for status, row in zip(FINISHED, pipe.execute(), strict=True)}
    return _layout(Chart("finished", "Jobs finished per hour", "jobs", list(FINISHED), buckets, values))


def finished_per_minute(first_minute: int, counts: dict[str, list[int]]) -> Chart:
    """Jobs finished per minute by status (`claudeq top`'s snapshot: among the newest jobs, the last hour)."""
    series = [status for status in FINISHED if status in counts]
    buckets = list(range(first_minute, first_minute + len(next(iter(counts.values()), []))))
    values = {status: [float(n) for n in counts[status]] for status in series}
    chart = Chart("finished-minute", "Jobs finished per minute", "jobs", series, buckets, values, bucket_s=60)
    return _layout(chart)


def spend_per_hour(client: redis.Redis, keys: Keys, now: float, kind: str, names: Sequence[str]) -> Chart:
    """Dollars spent per hour over the last HOURS hours, one series per tenant (`kind` "tenant") or account."""
    current = int(now // 3600)
    buckets = list(range(current - HOURS + 1, current + 1))
    pipe = client.pipeline(transaction=False)
    for name in names:
        key = keys.tenant_spend(name) if kind == "tenant" else keys.account_spend(name)
        pipe.hmget(key, [f"h:{b}" for b in buckets])
    values = {name: [_number(v) for v in row] for name, row in zip(names, pipe.execute(), strict=True)}
    title = f"Cost per hour by {kind}"
    return _layout(Chart(f"cost-{kind}", title, "$", list(names), buckets, values))


@dataclass(frozen=True)
class Gauge:
    """A bar of an account's row: `used` of `limit` (slots), or a window's utilization (0..1) and reset."""

    kind: str  # "slots" or "window"
    name: str
    fraction: float
    text: str
    title: str


def account_gauges(state: AccountState) -> list[Gauge]:
    """An account's slots in use, then each rate-limit window (utilization, reset), as bars."""
    slots = Gauge(
        "slots",
        "slots",
        state.slots_in_use / state.max_concurrency if state.max_concurrency else 0.0,
        f"{state.slots_in_use}/{state.max_concurrency}",
        f"{state.name}: {state.slots_in_use} of {state.max_concurrency} slots in use",
    )
    gauges = [slots]
    for name, window in state.windows.items():
        if window.utilization is None:
            continue
        reset = f", resets {window.resets_at:%Y-%m-%d %H:%M} UTC" if window.resets_at else ""
        text = f"{window.utilization:.0%}" + (f" · resets {window.resets_at:%H:%M}" if window.resets_at else "")
        title = f"{state.name}: {name} at {window.utilization:.0%}{reset}"
        gauges.append(Gauge("window", name, min(max(window.utilization, 0.0), 1.0), text, title))
    return gauges


def account_history(client: redis.Redis, keys: Keys, now: float, kind: str, names: Sequence[str]) -> Chart:
    """Per minute over the last HISTORY_HOURS hours, one series per account: the rate-limit signals counted
    (`kind` "signals": rejections and warnings) or the slots in use sampled (`kind` "slots")."""
    current = int(now // 60)
    buckets = list(range(current - HISTORY_HOURS * 60 + 1, current + 1))
    hours = sorted({b // 60 for b in buckets})
    pipe = client.pipeline(transaction=False)
    for name in names:
        for hour in hours:
            pipe.hgetall(keys.account_history(name, hour))
    replies = iter(pipe.execute())
    values: dict[str, list[float]] = {}
    for name in names:
        fields: dict[str, float] = {}
        for _hour in hours:
            fields |= {k.decode(): _number(v) for k, v in next(replies).items()}
        counters = HISTORY_COUNTERS if kind == "signals" else ("slots",)
        values[name] = [sum(fields.get(f"{c}:{b}", 0.0) for c in counters) for b in buckets]
    if kind == "signals":
        chart = Chart(
            "rate-limits",
            "Rate-limit signals per minute by account",
            "signals",
            list(names),
            buckets,
            values,
            bucket_s=60,
        )
    else:
        chart = Chart("slots", "Slots in use per minute by account", "slots", list(names), buckets, values, bucket_s=60)
    return _layout(chart)
