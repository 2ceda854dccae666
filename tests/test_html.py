"""traceviz html: one self-contained page, loaded in a real headless browser (chromium
through selenium) with no console errors, every section shown, figures decoded and
links that land on their targets."""
from __future__ import annotations

import html
import re
import shutil

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import out_dir

from traceviz.cli import main
from traceviz.commands import pipeline
from traceviz.job.report import make_report
from traceviz.table.result import write
from traceviz.synth import SynthConfig, synthesize

SECTIONS = ("diagnosis", "summary", "timeline", "overlap", "pipeline", "kernels", "model",
            "collectives", "stragglers")
STRAGGLER = 3


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("html_job")
    synthesize(SynthConfig(tp=2, pp=2, dp=2, microbatches=4, layers=4, seed=2,
                           straggler_rank=STRAGGLER, straggler_factor=1.4), root / "job")
    out = root / "job.html"
    result = CliRunner().invoke(main, ["html", str(root / "job"), "-o", str(out),
                                       "--global-batch-size", "8", "--seq-len", "4096"])
    assert result.exit_code == 0, result.output
    return root, out, out_dir(root / "job") / "iteration_10"


def test_page_is_self_contained(page):
    root, out, tables = page
    text = out.read_text()
    # scripts are inline (plotly's library once), and outside them nothing names a URL
    assert "<script src" not in text and text.count("plotly.js v") >= 1
    markup = re.sub(r"<script>.*?</script>", "", text, flags=re.S)
    assert not re.search(r"(src|href)\s*=\s*['\"](https?:)?//", markup), "no network"
    for key in SECTIONS:
        assert f"<section id='{key}'>" in text
    rep = make_report(tables)
    assert f"{rep['throughput']['mean']['time_ms']:,.2f} ms" in text
    top = rep["cross_rank"]["by_group"]
    tp = next(g for g in top if g["group"] == "TP")
    assert tp["last_to_arrive"][0]["rank"] == STRAGGLER
    assert [s.rank for s in rep["diagnosis"].stragglers] == [STRAGGLER]
    assert f"<a href='#rank-{STRAGGLER}'>rank {STRAGGLER}</a>" in text
    assert f"<tr id='rank-{STRAGGLER}'>" in text
    # the pipeline section lists the gaps of the pipeline view's gaps table
    write(pipeline.run(tables), root / "pipe")
    gaps = pq.read_table(root / "pipe" / "pipeline_gaps.parquet").to_pylist()
    assert gaps
    for g in gaps:
        line = f"{g['ns'] / 1e6:.3f} ms: {g['what']}"
        assert f"<li>{html.escape(line)}</li>" in text

def _driver():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not browser or not driver_path:
        pytest.skip("chromium and chromedriver are not installed (Debian: apt-get install "
                    "chromium chromium-driver); .ci/run installs them")
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="selenium is in the test extra")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


def test_page_in_headless_chromium(page):
    _, out, _ = page
    driver = _driver()
    try:
        driver.get(out.as_uri())
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        from selenium.webdriver.common.by import By

        for key in SECTIONS:
            section = driver.find_element(By.ID, key)
            assert section.is_displayed() and section.size["height"] > 40
        images = driver.find_elements(By.TAG_NAME, "img")
        assert len(images) >= 4
        assert all(driver.execute_script("return arguments[0].complete && "
                                         "arguments[0].naturalWidth > 0", img)
                   for img in images)
        link = driver.find_element(By.CSS_SELECTOR, f"#stragglers a[href='#rank-{STRAGGLER}']")
        link.click()
        assert driver.execute_script("return location.hash") == f"#rank-{STRAGGLER}"
        row = driver.find_element(By.ID, f"rank-{STRAGGLER}")
        assert row.text.startswith(f"rank {STRAGGLER}")
        nav = driver.find_elements(By.CSS_SELECTOR, "nav a")
        assert [a.get_attribute("hash") for a in nav] == [f"#{k}" for k in SECTIONS]
        # nothing but the page itself and data: URIs is loaded
        loaded = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert all(u.startswith(("data:", "file:", "blob:")) for u in loaded), loaded
        # a few screens before the folded details
        assert driver.execute_script("return document.body.scrollHeight") <= 4 * 1000
    finally:
        driver.quit()


def test_page_interactions(page):
    """The job timeline has a bar per micro-batch step of every rank and zooms; the
    tables sort by a click on a column and filter by text."""
    _, out, _ = page
    driver = _driver()
    try:
        driver.get(out.as_uri())
        from selenium.webdriver.common.by import By

        bars = driver.execute_script(
            "var d = document.getElementById('job-timeline');"
            "return d._fullLayout ? d.data.map(t => [t.name, t.x.length]) : null")
        # 8 ranks x 4 micro-batches, one forward and one backward step each
        assert bars == [["Forward", 32], ["Backward", 32]]
        assert driver.execute_script(
            "return document.getElementById('pipeline-timeline').data.length") == 2
        driver.execute_script(
            "var d = document.getElementById('job-timeline');"
            "Plotly.relayout(d, {'xaxis.range': [2, 3]})")
        ticks = driver.execute_script(
            "return Array.from(document.querySelectorAll('#job-timeline .xtick text'))"
            ".map(t => parseFloat(t.textContent))")
        assert ticks and all(2 <= t <= 3 for t in ticks), ticks

        header = driver.find_elements(By.CSS_SELECTOR, "#table-overlap thead th")[2]
        header.click()
        comm = [float(v.replace(",", "")) for v in column_of(driver, "table-overlap", 2)]
        assert comm == sorted(comm) and len(comm) == 8 and comm != sorted(comm, reverse=True)
        header.click()
        assert [float(v.replace(",", "")) for v in column_of(driver, "table-overlap", 2)] \
            == sorted(comm, reverse=True)
        kernels = driver.find_element(By.CSS_SELECTOR, "input[data-table='table-kernels']")
        kernels.send_keys("flash")
        names = column_of(driver, "table-kernels", 0)
        assert names and all("flash" in n.lower() for n in names)
    finally:
        driver.quit()


def column_of(driver, table: str, i: int) -> list[str]:
    from selenium.webdriver.common.by import By

    return [r.find_elements(By.TAG_NAME, "td")[i].get_attribute("textContent")
            for r in driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")
            if r.is_displayed()]


def test_a_trace_beside_anothers_memory_tables_gets_its_page(tmp_path, monkeypatch):
    """A folder's traces are parsed into traceviz-out/<folder>/, a trace's alone into
    traceviz-out/<its name>/: one folder when they are named alike. With a memory trace
    parsed there, the page of the plain trace failed on its own missing allocator events;
    the memory section is optional, the page is written."""
    from helpers import shared

    monkeypatch.chdir(tmp_path)
    (tmp_path / "single_gpt").mkdir()
    for name in ("single_gpt.json.gz", "single_gpt_memory.json.gz"):
        shutil.copy(shared("gpu/single_gpt") / name, tmp_path / "single_gpt" / name)
    parsed = CliRunner().invoke(main, ["batch", "single_gpt", "-q", "--cpu"])
    assert parsed.exit_code == 0, parsed.output
    got = CliRunner().invoke(main, ["html", "single_gpt/single_gpt.json.gz", "-o",
                                    "page.html"])
    assert got.exit_code == 0, got.output
    # the mean of its three steps (60.90, 60.60, 61.07 ms), as the report gives it
    text = (tmp_path / "page.html").read_text()
    assert "iteration time<b>60.86 ms" in text
    # its timeline is its own steps: the folder's other trace is not read with it (the
    # step windows refused the two traces that state no rank)
    assert "no timeline" not in text
    (tmp_path / "alone").mkdir()
    shutil.copy(shared("gpu/single_gpt") / "single_gpt.json.gz", tmp_path / "alone")
    from traceviz import Job

    by_itself = Job(tmp_path / "alone" / "single_gpt.json.gz", tables=tmp_path / "t")
    alone = by_itself.microbatches()
    steps, clocks = Job(tmp_path / "single_gpt" / "single_gpt.json.gz").step_windows()
    assert alone.num_rows > 0 and steps.equals(alone)
    assert clocks == by_itself.aggregation().clocks
    got = CliRunner().invoke(main, ["aggregate", "single_gpt/single_gpt.json.gz"])
    assert got.exit_code == 0, got.output
    written = pq.read_table(tmp_path / "traceviz-out/single_gpt/microbatches.parquet")
    assert written.equals(alone)
    # one rank: nothing was synced, and its timeline's axis does not say so
    from traceviz.render.aggregation_files import aggregation_files

    drawn = aggregation_files(by_itself.aggregation(), None, None)
    ax = drawn.figures["rank_0000/overlapping_timeline.png"].figure().axes[-1]
    assert ax.get_xlabel() == "ms since each rank's first kernel"


def test_a_trace_that_failed_to_parse_is_named_not_replaced(tmp_path, monkeypatch):
    """A trace whose parse failed, beside another trace's table in its tables folder:
    the commands on it say so (they took the other trace's table for it)."""
    from helpers import shared

    monkeypatch.chdir(tmp_path)
    (tmp_path / "single_gpt").mkdir()
    shutil.copy(shared("gpu/single_gpt") / "single_gpt_memory.json.gz",
                tmp_path / "single_gpt")
    (tmp_path / "single_gpt" / "single_gpt.json.gz").write_bytes(b"\x1f\x8b not gzip")
    CliRunner().invoke(main, ["batch", "single_gpt", "-q"])
    got = CliRunner().invoke(main, ["aggregate", "single_gpt/single_gpt.json.gz"])
    assert got.exit_code != 0
    assert "single_gpt.json.gz: no table was parsed from it" in got.output
    assert "single_gpt_memory" not in got.output.split("no table was parsed")[0]
