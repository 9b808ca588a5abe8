"""Statistics: Pearson r and same-session baseline comparison."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis.stats import change_vs_baseline, correlations_by_cell, pearson
from harness.figures.correlation_report import correlation_lines


def test_pearson_matches_definition_and_refuses_degenerate_input() -> None:
    x = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0])
    y = pd.Series([2.1, 3.9, 6.2, 8.1, 9.8])
    c = pearson(x, y)
    mx, my = x.mean(), y.mean()
    expected = ((x - mx) * (y - my)).sum() / math.sqrt(((x - mx) ** 2).sum() * ((y - my) ** 2).sum())
    assert c is not None and c.n == 5 and c.r == pytest.approx(expected) and c.p < 0.01
    assert pearson(pd.Series([1.0, 2.0]), pd.Series([1.0, 2.0])) is None
    assert pearson(pd.Series([1.0, 1.0, 1.0]), pd.Series([1.0, 2.0, 3.0])) is None
    assert pearson(pd.Series([1.0, 2.0, math.nan, 4.0]), pd.Series([1.0, 2.0, 3.0, 4.5])).n == 3


def test_pearson_interval_is_fisher_z() -> None:
    """95 % interval: tanh(atanh(r) -+ 1.96 / sqrt(n - 3)), by hand; none with 3 pairs (a zero denominator)."""
    x = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    y = pd.Series([1.2, 1.9, 3.4, 3.8, 5.5, 5.7, 7.4])
    c = pearson(x, y)
    assert c is not None
    half = 1.959964 / math.sqrt(7 - 3)
    assert (c.low, c.high) == pytest.approx((math.tanh(math.atanh(c.r) - half), math.tanh(math.atanh(c.r) + half)),
                                            abs=1e-5)
    three = pearson(pd.Series([1.0, 2.0, 3.0]), pd.Series([1.0, 3.0, 2.5]))
    assert three is not None and math.isnan(three.low) and math.isnan(three.high)


def streaming_requests() -> pd.DataFrame:
    """Two cold cells whose decode speed rises with the device's MB/s within each, and a warm cell that reads
    nothing and decodes 30x faster: pooled, r is strongly negative (warm is faster), which is about neither."""
    rows = [{"cell": "ra=128 cold", "cache": "cold", "decode_dev_mbps": 100 + 10 * i, "decode_tps": 1.0 + 0.1 * i
             + (0.05 if i % 2 else 0)} for i in range(6)]
    rows += [{"cell": "ra=8192 cold", "cache": "cold", "decode_dev_mbps": 900 + 20 * i,
              "decode_tps": 0.8 + 0.01 * i} for i in range(5)]
    rows += [{"cell": "ra=128 warm", "cache": "warm", "decode_dev_mbps": 0.0, "decode_tps": 30.0 + i}
             for i in range(6)]
    return pd.DataFrame(rows)


def test_correlation_per_cell_over_cold_requests_not_pooled() -> None:
    points = streaming_requests()
    pooled = pearson(points["decode_dev_mbps"], points["decode_tps"])
    assert pooled is not None and pooled.r < -0.5  # what report.md used to print
    table = correlations_by_cell(points[points["cache"] == "cold"], "decode_dev_mbps", "decode_tps").set_index("cell")
    assert list(table.index) == ["ra=128 cold", "ra=8192 cold"]
    assert table.loc["ra=128 cold", "r"] > 0.95 and table.loc["ra=128 cold", "n"] == 6
    assert table.loc["ra=128 cold", "low"] < table.loc["ra=128 cold", "r"] < table.loc["ra=128 cold", "high"]
    text = "\n".join(correlation_lines(points))
    assert "over its cold requests" in text and "ra=128 warm" not in text  # warm requests stream nothing
    assert "| ra=8192 cold |          5 | 1.00 |" in text
    assert f"{pooled.r:.2f}" not in text and "all requests" not in text


def test_change_vs_baseline_pairs_rounds() -> None:
    # drift: round 2 is 10 % faster for everyone; the variant is always +20 % within its round
    rows = []
    for rnd, drift in ((1, 1.0), (2, 1.1)):
        rows += [{"ra": 128, "round": rnd, "tps": 10 * drift}, {"ra": 8192, "round": rnd, "tps": 12 * drift},
                 {"ra": 8192, "round": rnd, "tps": 12 * drift}]
    out = change_vs_baseline(pd.DataFrame(rows), "tps", ["ra"], {"ra": 128}).set_index("ra")
    assert out.loc[128, "is_baseline"] and out.loc[128, "change_pct"] == pytest.approx(0.0)
    assert out.loc[8192, "change_pct"] == pytest.approx(20.0)
    assert out.loc[8192, "change_sd_pct"] == pytest.approx(0.0, abs=1e-9)  # drift cancelled by pairing
    assert out.loc[8192, "n_rounds"] == 2 and out.loc[8192, "mean"] == pytest.approx(12.6)
