#!/usr/bin/env python3
"""Charts the operator's /metrics as sampled during `make demo` (KUBESYNC_DEMO_METRICS).

Input: JSON lines, each {"t": seconds, "step": n, "title": "...", "metrics": "<Prometheus text>"}.
Output: a PNG with three panels over the demo's steps: propagation lag (each copy written with a
change, by sync kind and cluster), copies by state (every ObjectSync and ClusterObjectSync), and
what is behind (stale copies, stale ResourceSync objects, the oldest one's age).

Exits non-zero when the samples show no propagation or no copy state: the picture would be empty.

Usage: dashboard.py SAMPLES.jsonl OUT.png
"""

import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

STATES = ["Synced", "Pending", "OutOfSync", "Conflict", "Error", "Refused"]
STATE_COLORS = {
    "Synced": "#2ca02c",
    "Pending": "#1f77b4",
    "OutOfSync": "#ff7f0e",
    "Conflict": "#9467bd",
    "Error": "#d62728",
    "Refused": "#7f7f7f",
}
LAG = "kubesync_propagation_lag_seconds"


def samples_of(text):
    """(name, labels, value) of every sample in a Prometheus text exposition."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, s.labels, s.value


def read(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    if not rows:
        sys.exit(f"{path}: no samples")
    return rows


def summarise(row):
    """One sample's figures: copies by state, stale counts, lag histograms by (sync, cluster)."""
    states = defaultdict(float)
    stale_copies = stale_objects = oldest = 0.0
    lag = defaultdict(lambda: {"count": 0.0, "sum": 0.0, "buckets": {}})
    for name, labels, value in samples_of(row["metrics"]):
        if name == "kubesync_objectsync_destinations":
            states[labels["state"]] += value
        elif name == "kubesync_objectsync_stale_copies":
            stale_copies += value
        elif name == "kubesync_resourcesync_stale_objects":
            stale_objects += value
        elif name in (
            "kubesync_objectsync_oldest_stale_seconds",
            "kubesync_resourcesync_oldest_stale_seconds",
        ):
            oldest = max(oldest, value)
        elif name.startswith(LAG + "_"):
            series = lag[(labels["sync"], labels["cluster"])]
            if name == LAG + "_count":
                series["count"] = value
            elif name == LAG + "_sum":
                series["sum"] = value
            elif name == LAG + "_bucket":
                series["buckets"][float(labels["le"])] = value
    return states, stale_copies, stale_objects, oldest, lag


def quantile(q, buckets):
    """histogram_quantile over cumulative buckets {upper bound: count} (linear in a bucket)."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for upper in bounds:
        count = buckets[upper]
        if count >= rank:
            if upper == float("inf"):
                return lower
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = upper, count
    return lower


def main(samples, out):
    rows = read(samples)
    # Each step gets the same width, its samples spread over it by time: the demo's steps
    # take from 50 ms to several seconds, and all of them should be readable.
    starts = []  # (first sample's time, step, title)
    for r in rows:
        if not starts or starts[-1][1] != r["step"]:
            starts.append((r["t"], r["step"], r["title"]))
    ends = [s[0] for s in starts[1:]] + [rows[-1]["t"] + 0.05]
    t = []
    for r in rows:
        i = max(i for i, s in enumerate(starts) if s[0] <= r["t"] and s[1] == r["step"])
        t.append(i + (r["t"] - starts[i][0]) / max(ends[i] - starts[i][0], 1e-9))
    summaries = [summarise(r) for r in rows]

    # Lag: what each interval between two samples added to each histogram.
    points = defaultdict(list)  # (sync, cluster) -> [(t, mean ms, p99 ms, copies)]
    previous = {}
    for ti, (_, _, _, _, lag) in zip(t, summaries):
        for key, h in lag.items():
            before = previous.get(key, {"count": 0.0, "sum": 0.0, "buckets": {}})
            copies = h["count"] - before["count"]
            if copies > 0:
                delta = {le: v - before["buckets"].get(le, 0.0) for le, v in h["buckets"].items()}
                mean = (h["sum"] - before["sum"]) / copies
                points[key].append((ti, mean * 1e3, (quantile(0.99, delta) or 0) * 1e3, copies))
            previous[key] = h
    final_lag = summaries[-1][4]
    if not points:
        sys.exit(f"{samples}: no copy was written with a change (no propagation lag observed)")
    if not any(sum(s[0].values()) for s in summaries):
        sys.exit(f"{samples}: no ObjectSync destination was ever counted")

    fig, (ax_lag, ax_states, ax_stale, ax_steps) = plt.subplots(
        4, 1, figsize=(13, 12.5), gridspec_kw={"height_ratios": [3, 3, 2, 1.1]}
    )
    fig.suptitle(
        f"kubesync during make demo: the operator's /metrics, {len(rows)} samples in "
        f"{rows[-1]['t']:.1f} s",
        fontsize=13,
    )

    # Step boundaries; the steps' numbers under the last chart, their titles below it.
    for ax in (ax_lag, ax_states, ax_stale):
        ax.set_xlim(0, len(starts))
        ax.set_xticks([i + 0.5 for i in range(len(starts))])
        ax.set_xticklabels([])
        for i in range(len(starts)):
            ax.axvline(i, color="#cccccc", linewidth=0.8, zorder=0)
    ax_stale.set_xticklabels([str(s[1]) for s in starts])
    ax_steps.axis("off")
    half = (len(starts) + 1) // 2
    for column, part in enumerate((starts[:half], starts[half:])):
        text = "\n".join(
            f"{n:>2}. {title[:68] + ('…' if len(title) > 68 else '')}  ({end - start:.2f} s)"
            for (start, n, title), end in zip(part, ends[column * half:])
        )
        ax_steps.text(0.5 * column, 1.0, text, va="top", ha="left", fontsize=7.5,
                      family="monospace", transform=ax_steps.transAxes)

    markers = iter("os^Dv")
    for key in sorted(points):
        sync, cluster = key
        pts = points[key]
        h = final_lag[key]
        label = (
            f"{sync} → {cluster}: {int(h['count'])} copies, "
            f"p50 {quantile(0.5, h['buckets']) * 1e3:.0f} ms, p99 {quantile(0.99, h['buckets']) * 1e3:.0f} ms"
        )
        line = ax_lag.scatter(
            [p[0] for p in pts], [p[1] for p in pts], s=[12 + 6 * p[3] for p in pts],
            marker=next(markers, "o"), alpha=0.75, label=label,
        )
        ax_lag.vlines(
            [p[0] for p in pts], [p[1] for p in pts], [max(p[1], p[2]) for p in pts],
            color=line.get_facecolor()[0], linewidth=0.8, alpha=0.6,
        )
    ax_lag.set_yscale("log")
    ax_lag.set_ylabel("propagation lag (ms)")
    ax_lag.set_title(
        "Propagation lag: mean of the copies written between two samples (dot size: how many), line up to their p99",
        fontsize=9, loc="left",
    )
    ax_lag.legend(loc="upper left", fontsize=8)
    ax_lag.grid(axis="y", which="both", alpha=0.3)

    ax_states.stackplot(
        t,
        [[s[0].get(state, 0.0) for s in summaries] for state in STATES],
        labels=STATES,
        colors=[STATE_COLORS[s] for s in STATES],
        alpha=0.85,
        step="post",
    )
    ax_states.set_ylabel("destinations")
    ax_states.set_title("ObjectSync destinations by state (all ObjectSyncs)", fontsize=9, loc="left")
    ax_states.legend(loc="upper left", fontsize=8, ncol=6)

    ax_stale.step(t, [s[1] for s in summaries], where="post", label="stale copies (ObjectSync)", color="#ff7f0e")
    ax_stale.step(t, [s[2] for s in summaries], where="post", label="stale objects (ResourceSync)", color="#1f77b4")
    ax_stale.set_ylabel("behind their source")
    ax_stale.set_xlabel("the demo's steps, each the same width (its samples spread over it by time)")
    age = ax_stale.twinx()
    age.plot(t, [s[3] for s in summaries], label="oldest stale age (s)", color="#d62728", linestyle=":")
    age.set_ylabel("oldest (s)")
    handles = ax_stale.get_legend_handles_labels()
    more = age.get_legend_handles_labels()
    ax_stale.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left", fontsize=8)
    ax_stale.set_title("What is behind", fontsize=9, loc="left")

    fig.tight_layout()
    fig.savefig(out, dpi=90)
    copies = int(sum(h["count"] for h in final_lag.values()))
    print(f"dashboard: {len(rows)} samples, {len(starts)} steps, {copies} copies timed -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
