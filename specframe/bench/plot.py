"""A bench's speedups as a PNG chart (matplotlib, the optional 'plot' extra), drawn from the rows as ``bench --json``
saves them, so that a saved bench can be drawn again without running it; llama.cpp's speedup from a peers report
(benchmarks/peers/results.json) beside them when one is given."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import Any

from specframe.bench.runner import CHAIN, ORACLE, PLAIN
from specframe.errors import SpecframeError
from specframe.files import atomic_write, read_text

BEST_NATIVE = "llama.cpp's best native type"   # the peers report's row for llama.cpp's own best speculation


@dataclass
class SavedBench:
    rows: list[dict[str, Any]]   # BenchRow.as_dict() of each row
    title: str                   # what the run was: config, date and machine as far as the file says


@dataclass
class PeerSpeedups:
    by_workload: dict[str, float]   # llama.cpp's best native type over llama.cpp's own plain decoding
    label: str


def load_bench(path: str | os.PathLike) -> SavedBench:
    """A bench saved by ``bench --json``; a SpecframeError names the file when it is not one."""
    data = _json(path)
    rows = data.get("rows") if isinstance(data, dict) else None
    if not (isinstance(rows, list) and rows and all(isinstance(r, dict) and {"workload", "strategy", "speedup"}
                                                    <= r.keys() for r in rows)):
        raise SpecframeError(f"{path}: not a bench saved by 'specframe bench --json' (no rows with workload, "
                             "strategy and speedup)")
    return SavedBench(rows, bench_title(data))


def bench_title(data: dict[str, Any]) -> str:
    parts = [os.path.basename(str(data["config"])) if data.get("config") else "",
             data.get("date", ""), data.get("machine", "")]
    return ", ".join(p for p in parts if p)


def load_peers(path: str | os.PathLike) -> PeerSpeedups:
    """llama.cpp's best native type per workload from a peers report; a SpecframeError names the file when it has
    none."""
    data = _json(path)
    rows = data.get("rows", []) if isinstance(data, dict) else []
    speedups = {r["workload"]: r["peer_speedup"] for r in rows if isinstance(r, dict)
                and str(r.get("peer", "")).startswith(BEST_NATIVE) and r.get("peer_speedup") is not None}
    if not speedups:
        raise SpecframeError(f"{path}: no '{BEST_NATIVE}' rows: not a report of benchmarks/peers/run.py")
    meta = data.get("meta", {})
    where = ", ".join(str(p) for p in (meta.get("date"), meta.get("environment", {}).get("cpu")) if p)
    return PeerSpeedups(speedups, f"{BEST_NATIVE} over its own plain" + (f" (peers run {where})" if where else ""))


def _json(path: str | os.PathLike) -> Any:
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise SpecframeError(f"{path}: not JSON ({exc})") from None


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files; a SpecframeError says how to install it when it is missing (checked
    before a bench runs, not after)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecframeError("plotting needs matplotlib: pip install 'specframe[plot]'") from None
    return plt


def plot(bench: SavedBench, path: str | os.PathLike, peers: PeerSpeedups | None = None) -> None:
    """Grouped bars per workload: each drafter alone and the chain, as speedup over plain decoding (the dashed line
    at 1); the oracle's speedup, the ceiling of drafting on this machine, as a line over each group; llama.cpp's
    best speculation, over its own plain decoding, as a marker."""
    plt = pyplot()
    rows = bench.rows
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    strategies = list(dict.fromkeys(r["strategy"] for r in rows if r["strategy"] not in (PLAIN, ORACLE)))
    speedup = {(r["workload"], r["strategy"]): r["speedup"] for r in rows}
    width = 0.8 / max(1, len(strategies))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(workloads) * max(2, len(strategies)) * 0.5), 5.4))
    for i, strategy in enumerate(strategies):
        xs = [w + (i - (len(strategies) - 1) / 2) * width for w in range(len(workloads))]
        chain = strategy == CHAIN
        bars = ax.bar(xs, [speedup.get((w, strategy), 0.0) for w in workloads], width, label=strategy,
                      edgecolor="black" if chain else None, linewidth=1.2 if chain else 0)
        if chain:
            ax.bar_label(bars, fmt="%.2fx", fontsize="small", padding=2)
    for w, workload in enumerate(workloads):
        if (workload, ORACLE) in speedup:
            ax.hlines(speedup[workload, ORACLE], w - 0.45, w + 0.45, colors="black", linewidth=2,
                      label="oracle (every draft accepted)" if w == 0 else None)
            ax.annotate(f"{speedup[workload, ORACLE]:.2f}x", (w + 0.45, speedup[workload, ORACLE]),
                        fontsize="small", va="bottom", ha="right")
    if peers is not None:
        for w, workload in enumerate(workloads):
            if workload in peers.by_workload:
                ax.hlines(peers.by_workload[workload], w - 0.45, w + 0.45, colors="crimson", linewidth=2,
                          linestyles=(0, (4, 2)), label=peers.label if w == 0 else None)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="plain decoding")
    ax.set_xticks(range(len(workloads)), workloads)
    ax.tick_params(axis="x", length=0)
    ax.set_ylabel("speedup over plain decoding")
    ax.set_ylim(0, max([1.0, *speedup.values(), *(peers.by_workload.values() if peers else [])]) * 1.18)
    ax.set_title("specframe bench: greedy tokens/s over plain decoding"
                 + (f"\n{bench.title}" if bench.title else ""), fontsize="medium")
    ax.legend(fontsize="small", ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1), frameon=False)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    atomic_write(path, png.getvalue())
