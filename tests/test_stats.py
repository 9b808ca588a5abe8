"""Statistics: Pearson r and same-session baseline comparison."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.analysis.stats import change_vs_baseline, pearson


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
