"""Benchmark results as a table (the chart is specframe.bench.plot's)."""

from __future__ import annotations

from specframe.bench.runner import BenchRow
from specframe.drafting.pass_cost import PassCost

_COLUMNS = [  # header, width, cell
    ("workload", 16, lambda r: r.workload),
    ("strategy", 16, lambda r: r.strategy),
    ("tokens", 6, lambda r: f"{r.tokens}"),
    ("tok/s", 7, lambda r: f"{r.tokens_per_second:.2f}"),
    ("speedup", 7, lambda r: f"{r.speedup:.2f}x"),
    ("spread", 6, lambda r: "-" if r.spread is None else f"±{100 * r.spread:.0f}%"),
    ("modeled", 7, lambda r: f"{r.modeled_speedup:.2f}x"),
    ("of oracle", 9, lambda r: "-" if r.oracle_fraction is None else f"{100 * r.oracle_fraction:.0f}%"),
    ("accept", 6, lambda r: "-" if r.acceptance_rate is None else f"{100 * r.acceptance_rate:.0f}%"),
    ("acc/draft", 9, lambda r: "-" if r.mean_accepted_length is None else f"{r.mean_accepted_length:.2f}"),
    ("pass/tok", 8, lambda r: f"{r.passes_per_token:.2f}"),
    ("drafting", 8, lambda r: f"{100 * r.drafting_share:.1f}%"),
    ("host ms/pass", 12, lambda r: f"{r.host_ms_per_pass:.3f}"),
    ("peak MiB", 8, lambda r: f"{r.peak_rss_mib:.0f}"),
    ("lossless", 0, lambda r: r.lossless),
]


def format_table(rows: list[BenchRow]) -> str:
    def line(cells):
        return "  ".join(f"{c:<{w}}" if i < 2 else f"{c:>{w}}" for i, ((_, w, _), c) in enumerate(zip(_COLUMNS, cells)))

    out = [line([h for h, _, _ in _COLUMNS]).rstrip()]
    for row in rows:
        out.append(line([cell(row) for _, _, cell in _COLUMNS]).rstrip())
    return "\n".join(out)


def format_pricing(cost: PassCost) -> str:
    """The table that priced the modeled speedups, in single passes: on a noisy machine it is what makes a bench's
    modeled column comparable with another's."""
    measured = cost.measured
    if not measured:
        return ("modeled: no pass-cost table (fixed draft lengths): a pass priced as a single one and half of one "
                "for each further token")
    single = measured[1]
    sizes = ", ".join(f"{n} tokens {seconds / single:.2f}" for n, seconds in measured.items() if n in (2, 4, 8, 16, 17))
    return (f"modeled: each run's passes priced by the pass-cost table at their depth: a single pass "
            f"{single * 1e3:.1f} ms at depth {cost.depth}; in single passes {sizes}; each token of a pass "
            f"{cost.per_position * 1e6:.2f} ms more per 1000 positions deeper")
