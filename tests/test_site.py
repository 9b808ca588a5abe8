"""``harness results publish``: the static dashboard, opened in a real headless browser (Debian's chromium through
its chromedriver, driven by selenium; nothing is downloaded). The history is the change-point tests' 30 nightly
sets (arm b's decode tok/s steps down 20 % at set 18, arm a stays flat), one of them with the report and figures
`harness report` draws, plus one incomplete set.

What a screenshot is checked for: the DOM text laid out inside the screenshot's viewport (a text node counts when
its box lies in the window) must hold the numbers, and the screenshot itself must not be blank (many colours, not
one). Text recognition on the pixels (tesseract) would check the same thing less reliably."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tests.helpers import cli_in_process
from tests.test_changes import STEP_AT, nightly_history
from tests.test_gate import tok_s, write_set

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
WINDOW = (1280, 1000)
# the text nodes laid out inside the window, in document order
VISIBLE_TEXT = """
const out = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walk.nextNode()) {
  const range = document.createRange(); range.selectNodeContents(walk.currentNode);
  const box = range.getBoundingClientRect();
  if (box.width > 0 && box.bottom > 0 && box.top < window.innerHeight && box.right > 0
      && box.left < window.innerWidth) { out.push(walk.currentNode.textContent); }
}
return out.join(" ");
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("site")
    results = base / "results"
    ids = nightly_history(results, 0.8)
    done = cli_in_process("report", ids[0], "--results", str(results))
    assert done.returncode == 0, done.stderr
    rng = np.random.default_rng(3)
    write_set(results, "20300301-030000-nightly-died", {"a": {"decode_tps": tok_s(rng, 20)},
                                                        "b": {"decode_tps": tok_s(rng, 20)}}, status="incomplete")
    done = cli_in_process("results", "publish", str(results / "site"), "--results", str(results))  # as make demo
    assert done.returncode == 0, done.stderr
    return {"results": results, "ids": ids, "out": results / "site", "stdout": done.stdout}


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(f"no {' or '.join(missing)} (apt-get install chromium chromium-driver): the browser tests skip")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tmp_path_factory.mktemp("chromium-profile")  # its own: other test processes run chromium too
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={WINDOW[0]},{WINDOW[1]}", f"--user-data-dir={profile}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


def local_file(url: str) -> Path:
    return Path(unquote(urlparse(url).path))


def open_page(driver, path: Path) -> list[dict]:  # noqa: ANN001 - a selenium WebDriver (imported lazily)
    """Load ``path``; the console's messages it logged (warnings and errors)."""
    driver.get(path.as_uri())
    return [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]


def test_every_page_loads_without_console_errors_and_every_link_and_image_resolves(site: dict, browser) -> None:  # noqa: ANN001
    out: Path = site["out"]
    seen, queue = set(), [out / "index.html"]
    while queue:
        page = queue.pop()
        if page in seen:
            continue
        seen.add(page)
        assert open_page(browser, page) == [], page
        for href in browser.execute_script("return Array.from(document.links, a => a.href)"):
            assert href.startswith("file://"), f"{page}: {href} leaves the site (no server, no CDN)"
            target = local_file(href)
            assert target.is_file(), f"{page}: link to {target} does not resolve"
            assert out in target.parents, f"{page}: {href} points outside the site"
            if target.suffix == ".html":
                queue.append(target)
        images = browser.execute_script(
            "return Array.from(document.images, i => [i.src, i.complete && i.naturalWidth > 0])")
        assert all(ok for _, ok in images), f"{page}: images not shown: {[src for src, ok in images if not ok]}"
        sources = browser.execute_script("return Array.from(document.querySelectorAll('[src]'), e => e.src)")
        assert all(src.startswith("file://") for src in sources), f"{page}: a resource from elsewhere: {sources}"
    ids = site["ids"]
    pages = {p.relative_to(out).as_posix() for p in seen}
    assert {f"sets/{one}/index.html" for one in ids} <= pages  # every set is reached from the index
    assert {"boards/index.html", "boards/local.html", "trends/index.html"} <= pages
    assert sum(1 for p in pages if p.startswith("trends/local/")) == 2  # one decode_tps trend per arm


def screenshot(driver, path: Path, shot: Path) -> str:  # noqa: ANN001
    """Load ``path``, save a screenshot of the window and return the DOM text laid out inside it."""
    assert open_page(driver, path) == []
    driver.save_screenshot(str(shot))
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0]) or pixels.shape[1] == WINDOW[0]
    colours = len(np.unique(pixels.reshape(-1, 3), axis=0))
    assert colours > 50 and pixels.std() > 10, f"{shot}: a blank screenshot ({colours} colours)"
    return " ".join(str(driver.execute_script(VISIBLE_TEXT)).split())


def test_the_index_screenshot_shows_the_sets_their_status_and_revisions(site: dict, browser, tmp_path: Path,  # noqa: ANN001
                                                                        ) -> None:
    shown = screenshot(browser, site["out"] / "index.html", tmp_path / "index.png")
    assert "31 set(s), 1 incomplete" in shown and "2 trend(s) with 1 change point(s)" in shown
    ids = site["ids"]
    for i in range(10):  # the oldest sets are at the top, each with its status and revision
        assert re.search(rf"{ids[i]} complete gatetest rev{i:02d} ", shown), ids[i]


def test_the_trend_screenshot_shows_the_step_at_its_set_with_its_size(site: dict, browser, tmp_path: Path,  # noqa: ANN001
                                                                      ) -> None:
    [page] = [p for p in (site["out"] / "trends" / "local").glob("*.html") if "arm_b" in p.name]
    shown = screenshot(browser, page, tmp_path / "trend.png")
    ids = site["ids"]
    found = re.search(rf"([0-9.]+) -> ([0-9.]+) tok/s \(([-+0-9.]+) %\) between {ids[STEP_AT - 1]} \(rev{STEP_AT - 1}\)"
                      rf" and {ids[STEP_AT]} \(rev{STEP_AT}\)", shown)
    assert found, shown
    assert float(found[3]) == pytest.approx(-20.0, abs=3.0)  # the injected step: 30 -> 24 tok/s
    # the chart: a point per set, and the dashed line between the two sets of the step
    points = browser.execute_script("return Array.from(document.querySelectorAll('svg.trend circle'), "
                                    "c => [c.getBoundingClientRect().x, c.textContent])")
    assert [title.split(" ")[0] for _, title in points] == ids
    [line] = browser.execute_script("return Array.from(document.querySelectorAll('svg.trend .change-line'), "
                                    "l => l.getBoundingClientRect().x)")
    assert points[STEP_AT - 1][0] < line < points[STEP_AT][0]
    requests = pd.read_parquet(site["results"] / ids[0] / "tables" / "requests.parquet")
    runs = pd.read_parquet(site["results"] / ids[0] / "tables" / "runs.parquet")
    first = requests[requests["run_id"].isin(runs.loc[runs["arm"] == "b", "run_id"])]["decode_tps"].median()
    assert f"{ids[0]} rev00 2030-01-01 03:00:00+00:00 {first:.4g}" in shown  # the oldest set's median, as shown


def test_a_set_page_renders_its_report_with_its_figures(site: dict, browser) -> None:  # noqa: ANN001
    page = site["out"] / "sets" / site["ids"][0] / "index.html"
    assert open_page(browser, page) == []
    headings = browser.execute_script("return Array.from(document.querySelectorAll('.report h2'), h => h.textContent)")
    assert "Runs" in headings  # report.md's sections, as HTML
    assert browser.execute_script("return document.querySelectorAll('.report table').length") >= 1
    images = browser.execute_script("return Array.from(document.images, i => [i.src, i.naturalWidth])")
    assert any(src.endswith("figures/change_vs_baseline.png") and width > 0 for src, width in images), images


def test_the_filter_box_hides_the_rows_without_its_words(site: dict, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    assert open_page(browser, site["out"] / "index.html") == []
    box = browser.find_element(By.CSS_SELECTOR, "input.filter")
    box.send_keys("incomplete")
    shown = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#sets tbody tr") if row.is_displayed()]
    assert len(shown) == 1 and "nightly-died" in shown[0]
    assert browser.find_element(By.ID, "sets-shown").text == "1 of 31"


def test_publishing_again_drops_the_pages_of_sets_that_are_gone(site: dict, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(site["results"], results)
    out = tmp_path / "site"
    assert cli_in_process("results", "publish", str(out), "--results", str(results)).returncode == 0
    shutil.rmtree(results / site["ids"][-1])
    assert cli_in_process("results", "publish", str(out), "--results", str(results)).returncode == 0
    assert not (out / "sets" / site["ids"][-1]).exists() and (out / "sets" / site["ids"][0]).exists()


def test_a_site_over_the_results_or_in_a_set_or_an_unknown_metric_is_one_line_and_exit_2(site: dict) -> None:
    results = site["results"]
    for out in (results, results / site["ids"][0] / "site"):
        done = cli_in_process("results", "publish", str(out), "--results", str(results))
        assert done.returncode == 2 and "must not be the results directory or lie inside a result set" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert not (results / site["ids"][0] / "site").exists()
    done = cli_in_process("results", "publish", str(results.parent / "x"), "--results", str(results),
                          "--metric", "nope")
    assert done.returncode == 2 and "unknown metric 'nope'" in done.stderr


QUICKSTART = Path(__file__).parent / "data" / "harness" / "quickstart-4950e0"


def quickstart_copies(results: Path, count: int) -> list[str]:
    """``count`` copies of the real quickstart set of tests/data (a day apart, each its own revision), each with
    the report.md and F4 figure the harness drew from it (tests/data/harness/SOURCE.md)."""
    import json

    expected = QUICKSTART.parent / "quickstart-4950e0-expected"
    ids = []
    for i in range(count):
        set_id = f"2026120{i + 1}-121351-quickstart-4950e{i}"
        path = results / set_id
        shutil.copytree(QUICKSTART, path)
        shutil.copyfile(expected / "report.md", path / "report.md")
        (path / "figures").mkdir()
        shutil.copyfile(expected / "change_vs_baseline.png", path / "figures" / "change_vs_baseline.png")
        manifest = json.loads((path / "manifest.json").read_text())
        manifest.update(set_id=set_id, started=f"2026-12-0{i + 1}T12:13:53+00:00",
                        harness=dict(manifest["harness"], git_revision=f"rev{i}"))
        (path / "manifest.json").write_text(json.dumps(manifest))
        ids.append(set_id)
    return ids


def test_the_real_quickstart_set_publishes_a_trend_per_cell_and_llama_bench_test(tmp_path: Path, browser,  # noqa: ANN001
                                                                                  ) -> None:
    ids = quickstart_copies(tmp_path / "results", 3)
    done = cli_in_process("results", "publish", str(tmp_path / "site"), "--results", str(tmp_path / "results"))
    assert done.returncode == 0, done.stderr
    cell = "read_ahead_kb=128 threads=2 cold"
    [page] = (tmp_path / "site" / "trends" / "local").glob("read_ahead_kb_128_threads_2_cold-*--bench_tps.html")
    shown = screenshot(browser, page, tmp_path / "bench.png")
    assert f"bench_tps · {cell} · local" in shown and "3 set(s)" in shown and "pp16" in shown and "tg32" in shown
    bench = pd.read_parquet(QUICKSTART / "tables" / "bench.parquet")
    runs = pd.read_parquet(QUICKSTART / "tables" / "runs.parquet")
    mine = bench[bench["run_id"].isin(runs.loc[runs["variant"] == cell, "run_id"])]
    for test in ("pp16", "tg32"):  # llama-bench's tests drawn and listed apart, with the set's own medians
        median = mine.loc[mine["test"] == test, "avg_tps"].median()
        assert f"{ids[0]} rev0 2026-12-01 12:13:53+00:00 {test} {median:.4g}" in shown, test
    assert open_page(browser, tmp_path / "site" / "sets" / ids[1] / "index.html") == []
    text = browser.find_element("css selector", ".report").text
    assert "Ratio vs the baseline" in text and "read_ahead_kb=128 threads=2 cold" in text
    images = browser.execute_script("return Array.from(document.images, i => [i.src, i.naturalWidth])")
    assert [(Path(src).name, width > 0) for src, width in images] == [("change_vs_baseline.png", True)]


def test_markup_in_a_report_or_a_name_shows_as_text(tmp_path: Path) -> None:
    results = tmp_path / "results"
    [set_id] = quickstart_copies(results, 1)
    report = results / set_id / "report.md"
    report.write_text(report.read_text() + "\n<script>alert(1)</script> error: `<b>` in a name\n")
    done = cli_in_process("results", "publish", str(tmp_path / "site"), "--results", str(results))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "site" / "sets" / set_id / "index.html").read_text()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<code>&lt;b&gt;</code>" in page


def test_an_empty_results_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    done = cli_in_process("results", "publish", str(tmp_path / "site"), "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "no result set to publish" in done.stderr
    assert not (tmp_path / "site").exists()
