"""`ccr-sim report`: the HTML report of the README's small sweep, opened in
headless Chromium, and the reader of the partitioned runs table.

The browser test needs Debian's `chromium` (/usr/bin/chromium; scripts/test.sh
installs it with apt-get when missing) and Python's playwright (the dev extra).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim import cli, report

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ROOT = Path(__file__).resolve().parent.parent
# The README's small sweep (2 scenarios x 2 link latencies), serially, on 2
# of its 4 seeds: the same cells, half the runs (the README's own section
# runs it whole on Spark).
SMALL = ROOT / "sim" / "sweeps" / "small.toml"
SEEDS = 2


@pytest.fixture(scope="module")
def sweep_out(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    here = tmp_path_factory.mktemp("report")
    text = SMALL.read_text()
    assert "seeds = { start = 1, count = 4 }" in text
    sweep = here / "small.toml"
    sweep.write_text(text.replace("count = 4", f"count = {SEEDS}"))
    out = here / "out"
    code = cli.main(["sweep", str(sweep), "--serial", "--out", str(out),
                     "--no-progress", "--report"])
    assert code == 0
    yield out


def test_sweep_report_writes_one_self_contained_file(
    sweep_out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (sweep_out / "report.html").read_text()
    manifest = json.loads((sweep_out / "sweep.json").read_text())
    assert manifest["git_commit"] != ""
    # Nothing to fetch: no external URL, script or style sheet.
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "<link" not in page
    # The comparison of the 4 cells, then per cell distributions and a timeline.
    assert page.count("data:image/png;base64,") >= 9
    overview = page.index("<h2 id=overview>The cells compared</h2>")
    assert overview < page.index("<h2>Cells</h2>")
    assert page.index('alt="the cells compared"') < page.index('alt="distributions of')
    # The failover's count of partitions at risk is not the loss, and says why.
    assert "It can be 0 while records were lost" in page
    assert "RPO at failover (partitions)" not in page
    # Provenance and the statistics the report promises.
    assert manifest["git_commit"] in page
    assert (
        "ccr-sim run dr-multi-zone --seed 1 --param link_latency_ms=150 --param mode=ASYNC"
        in page
    )
    # The replays for the timelines matched the sweep's trace digests.
    assert page.count("equals the sweep's") == 4 and "differs from" not in page
    assert "0 of 2: below 0.78 per seed at 95% (exact: 1 - 0.05^(1/n)" in page
    assert "95% CI of the mean" in page
    assert "availability_target_producer" in page and "expected value" in page


def test_report_in_headless_chromium(sweep_out: Path, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install -y "
                    "chromium; scripts/test.sh does it when apt-get is available)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright (dev extra)")
    from PIL import Image

    profile = tmp_path / "profile"
    profile.mkdir()
    shot = tmp_path / "report.png"
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS,
            headless=True, viewport={"width": 1280, "height": 900},
        )
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: errors.append(f"request {r.url}")
                    if not r.url.startswith(("file:", "data:")) else None)
            page.goto((sweep_out / "report.html").as_uri())
            page.wait_for_load_state("load")
            boxes = page.eval_on_selector_all(
                "figure img",
                "imgs => imgs.map(i => ({w: i.naturalWidth, h: i.naturalHeight, "
                "ok: i.complete, box: i.getBoundingClientRect().toJSON()}))",
            )
            scroll_y = page.evaluate("window.scrollY")
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert len(boxes) >= 9
    assert boxes[0]["box"]["y"] < boxes[1]["box"]["y"]  # the comparison comes first
    image = Image.open(shot).convert("RGB")
    for b in boxes:
        assert b["ok"] and b["w"] > 300 and b["h"] > 200, b
        box = b["box"]
        left, top = int(box["x"]), int(box["y"] + scroll_y)
        area = image.crop((left, top, left + int(box["width"]), top + int(box["height"])))
        pixels = np.asarray(area).reshape(-1, 3)
        drawn = int((pixels.min(axis=1) < 235).sum())
        # A plot, not a blank image: many pixels that are not white background
        # (a blank figure has none; axes and labels alone about 1%).
        assert drawn > 0.02 * len(pixels), (b, drawn, len(pixels))


def test_load_runs_reads_the_partitioned_table_in_run_order(sweep_out: Path) -> None:
    runs = report.load_runs(sweep_out)
    assert (sweep_out / "runs" / "scenario=failover-writable").is_dir()
    assert not any(isinstance(t, pd.CategoricalDtype) for t in runs.dtypes)
    assert list(runs["run_index"]) == list(range(len(runs)))
    assert sorted(set(runs["param_link_latency_ms"])) == [2, 150]
    cells = report.cells(runs)
    assert [c.title for c in cells][:2] == [
        "dr-multi-zone (link_latency_ms=2, mode=ASYNC)",
        "dr-multi-zone (link_latency_ms=150, mode=ASYNC)",
    ]
    assert len(cells) == 4


def test_cells_are_named_by_what_differs_and_panels_by_what_they_count(
    sweep_out: Path,
) -> None:
    cells = report.cells(report.load_runs(sweep_out))
    assert report.cell_labels(cells) == [
        "dr-multi-zone link_latency_ms=2", "dr-multi-zone link_latency_ms=150",
        "failover-writable link_latency_ms=2", "failover-writable link_latency_ms=150",
    ]
    rpo = report.Group.RPO
    assert report.panel_title(rpo, "RPO at failover", "failover_abandoned_partitions", True) == (
        "partitions the failover reported at risk"
    )
    assert report.panel_title(rpo, "RPO at failover", "rpo_records", True).startswith("RPO: ")
    latency = report.Group.LATENCY
    slowest = report.panel_title(latency, "produce latency", "produce_latency_max_ms", False)
    p99 = report.panel_title(latency, "produce latency", "produce_latency_p99_ms", False)
    assert slowest != p99 and "slowest" in slowest and "percentiles" in p99


def test_bad_input_is_refused_by_name(sweep_out: Path, tmp_path: Path) -> None:
    with pytest.raises(report.ReportError, match=r"sweep\.json: missing"):
        report.build(tmp_path)
    with pytest.raises(report.ReportError, match="--timeline nope: no such run_id"):
        report.build(sweep_out, ["nope"])
    assert cli.main(["report", str(tmp_path), "-o", str(tmp_path / "r.html")]) == 2


def test_statistics() -> None:
    assert report.bootstrap_ci([5.0]) is None
    low, high = report.bootstrap_ci([1.0, 2.0, 3.0, 4.0]) or (0.0, 0.0)
    assert 1.0 <= low < 2.5 < high <= 4.0
    assert report.bootstrap_ci([1.0, 2.0, 3.0, 4.0]) == (low, high)  # seeded
    assert report.rule_of_three(100) == "0 of 100: below 0.03 per seed at 95% (rule of three: 3/n)"
    assert report.seeds_text([3, 1, 2]) == "seeds 1-3 (3)"
    assert report.seeds_text([1, 5]) == "seeds 1, 5"
