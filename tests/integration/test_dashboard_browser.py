"""The web dashboard in a real headless Chromium: a running job's graph, a completed checkpoint, no console errors.

Chromium comes from Debian's package (``apt-get install -y chromium``; .ci/run
installs it), driven by Playwright's Python package through
``executable_path`` (Playwright cannot download its own browser here). The
test takes a full-page screenshot; with ``FLINKLIKE_UPDATE_SCREENSHOT=1`` it
replaces docs/dashboard.png with it (a test run never changes the checkout otherwise).
"""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest
from playwright.sync_api import sync_playwright

from connectors import CollectSink, SequenceSource
from flinklike_spark import StreamExecutionEnvironment
from flinklike_spark.errors import JobCancelledError
from tests.support.environment import require_environment

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(240)]

CHROMIUM = os.environ.get("FLINKLIKE_CHROMIUM", "/usr/bin/chromium")
DOCS_SCREENSHOT = pathlib.Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"


@pytest.fixture
def browser():
    require_environment(
        bool(shutil.which(CHROMIUM)),
        f"no Chromium at {CHROMIUM}: apt-get install -y chromium (.ci/run does), or set FLINKLIKE_CHROMIUM",
    )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def _double(row):
    return {"key": row["key"], "seq": row["seq"] * 2}


def test_dashboard_shows_a_running_job_and_its_checkpoints(browser, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment({
        "parallelism.default": 2,
        "local.number-taskmanager": 2,
        "rest.port": 0,
        "web.refresh-interval": "500ms",
        "metrics.fetcher.update-interval": "200ms",
        "execution.checkpointing.interval": "300ms",
        "execution.checkpointing.dir": f"file://{tmp_path}/chk",
    })  # fmt: skip
    (
        env.from_source(SequenceSource(num_keys=8, records_per_key=None, rows_per_second=2000), source_name="numbers")
        .map(_double).name("double")
        .key_by("key").map(lambda r: r).name("keyed")
        .sink_to(CollectSink("out"))
    )  # fmt: skip
    client = env.execute_async("dashboard")
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(client.web_interface_url)

        page.wait_for_selector(f'#job-list li[data-job-id="{client.job_id}"]', timeout=30_000)
        assert "RUNNING" in page.inner_text(f'#job-list li[data-job-id="{client.job_id}"]')
        # the job graph: one box per vertex, with records flowing on the last one
        page.wait_for_function(
            """() => { const v = document.querySelectorAll('#job-graph .vertex');
                       return v.length === 2 && /in [1-9][0-9.]*k?\\/s/.test(v[1].textContent); }""",
            timeout=30_000,
        )
        vertices = page.locator("#job-graph .vertex")
        assert vertices.nth(0).text_content().startswith("Source: numbers")
        assert "RUNNING" in vertices.nth(1).text_content() and "busy" in vertices.nth(1).text_content()
        assert page.locator("#job-graph .edge").count() == 1
        # a completed checkpoint in the history table and in the chart
        page.wait_for_selector('#checkpoint-history tr[data-status="COMPLETED"]', timeout=30_000)
        assert page.locator("#checkpoint-chart .duration-bar").count() >= 1
        assert "completed" in page.inner_text("#checkpoint-counts")
        assert page.locator("#taskmanagers tbody tr").count() == 2
        # it refreshes while the job runs
        refreshed = int(page.get_attribute("body", "data-refreshed"))
        page.wait_for_function(f"() => Number(document.body.dataset.refreshed) > {refreshed + 1}", timeout=15_000)
        assert page.is_visible("#cancel-job")
        screenshot = tmp_path / "dashboard.png"
        page.screenshot(path=str(screenshot), full_page=True)
        assert screenshot.stat().st_size > 10_000, "the screenshot is (nearly) empty"
        if os.environ.get("FLINKLIKE_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(screenshot, DOCS_SCREENSHOT)
        page.close()
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    assert errors == [], f"console errors: {errors}"


def test_dashboard_shows_a_rescale_with_its_cause(browser, tmp_path):
    env = StreamExecutionEnvironment.get_execution_environment({
        "jobmanager.scheduler": "adaptive", "parallelism.default": 1, "local.number-taskmanager": 2,
        "rest.port": 0, "web.refresh-interval": "300ms",
        "execution.checkpointing.interval": "300ms", "execution.checkpointing.dir": f"file://{tmp_path}/chk",
    })  # fmt: skip
    source = SequenceSource(num_keys=4, records_per_key=None, rows_per_second=500)
    env.from_source(source, source_name="numbers").key_by("key").map(lambda r: r).sink_to(CollectSink("out"))
    client = env.execute_async("dashboard rescale")
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{client.web_interface_url}#{client.job_id}")
        page.wait_for_selector("#rescales p.muted", timeout=30_000)
        assert page.inner_text("#rescales") == "no rescales"
        bounds = {v: {"parallelism": {"lowerBound": 1, "upperBound": 2}} for v in client.get_resource_requirements()}
        event = client.update_resource_requirements(bounds)
        page.wait_for_selector("#rescales .rescale", timeout=30_000)
        text = page.inner_text("#rescales .rescale")
        assert "parallelism 1 → 2" in text and "JobClient.update_resource_requirements" in text, text
        assert f"through checkpoint {event['checkpoint']}" in text, text
        page.close()
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    assert errors == [], f"console errors: {errors}"
