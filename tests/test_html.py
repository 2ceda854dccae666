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
from traceviz.commands.report import make_report
from traceviz.commands.result import write
from traceviz.synth import SynthConfig, synthesize

SECTIONS = ("summary", "overlap", "pipeline", "kernels", "collectives", "stragglers")
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
    assert "<script" not in text
    assert not re.search(r"(src|href)\s*=\s*['\"](https?:)?//", text), "no network"
    for key in SECTIONS:
        assert f"<section id='{key}'>" in text
    rep = make_report(tables)
    assert f"{rep['throughput']['mean']['time_ms']:,.2f} ms" in text
    top = rep["cross_rank"]["by_group"]
    tp = next(g for g in top if g["group"] == "TP")
    assert tp["stragglers"][0]["rank"] == STRAGGLER
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
    finally:
        driver.quit()
