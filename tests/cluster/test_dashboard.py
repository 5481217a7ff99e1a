"""The web dashboard in a real browser (Debian's chromium, driven by Playwright) on `agora local`.

Set AGORA_SCREENSHOTS=DIR to keep a screenshot of every page there (docs/figures/dashboard is
made that way).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from harness import ROOT, Daemon, eventually

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def agora(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    daemon = Daemon(
        ["local", "--port", "0", "--http-port", "0", "--agents", "2", "--work-dir", str(root)],
        root / "local.log",
    ).start(timeout=60)
    eventually(
        lambda: any("dashboard on" in line for line in daemon.lines),
        timeout=30,
        message="the dashboard",
    )
    [url] = [
        re.search(r"dashboard on (\S+)", x).group(1) for x in daemon.lines if "dashboard on" in x
    ]
    daemon.url = url.rstrip("/")
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def browser():
    # The sync API: these tests are plain functions, with no event loop of their own.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def shot(page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get("AGORA_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)


def test_a_person_follows_a_job_from_the_dashboard_to_its_output(local, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(local.url + "/")
    page.get_by_test_id("agents-count").filter(has_text="2 / 2").wait_for()
    page.get_by_test_id("frameworks-count").filter(has_text="2 / 2").wait_for()
    shot(page, tmp_path, "overview")

    page.click("nav >> text=Agents")
    rows = page.get_by_test_id("agents").locator("tbody tr")
    rows.nth(1).wait_for()
    assert rows.count() == 2
    assert {rows.nth(i).locator("td").first.inner_text() for i in range(2)} == {
        "local-0",
        "local-1",
    }
    shot(page, tmp_path, "agents")

    job = agora(
        "job", "submit", "--master", local.address, "--name", "greet", "--instances", "2",
        "--cpus", "0.1", "--mem", "32", "--wait", "--", "sh", "-c", "echo hello-from-the-dashboard",
    )  # fmt: skip
    assert job.returncode == 0, job.stdout + job.stderr + local.log_tail()

    page.click("nav >> text=Tasks")
    finished = page.get_by_test_id("tasks").locator("tbody tr", has_text="TASK_FINISHED")
    finished.nth(1).wait_for()
    page.get_by_test_id("filter-state").select_option("FINISHED")
    page.wait_for_url(re.compile(r"state=FINISHED"))
    shot(page, tmp_path, "tasks")
    finished.first.locator("a").click()
    page.get_by_test_id("log").filter(has_text="hello-from-the-dashboard").wait_for()
    assert page.get_by_test_id("files").locator("text=stdout").count() == 1
    shot(page, tmp_path, "task")

    page.click("nav >> text=Jobs")
    page.get_by_test_id("jobs").locator("tr", has_text="greet").wait_for()
    assert "SUCCEEDED" in page.get_by_test_id("jobs").inner_text()
    shot(page, tmp_path, "jobs")

    page.click("nav >> text=Frameworks")
    page.get_by_test_id("frameworks").locator("tr", has_text="batch").wait_for()
    (page.get_by_test_id("frameworks").locator("tr", has_text="batch").locator("button").click())
    page.get_by_test_id("why").locator("li").first.wait_for()
    shot(page, tmp_path, "frameworks")

    page.click("nav >> text=Roles")
    page.get_by_test_id("roles").locator("tr", has_text="*").wait_for()
    shot(page, tmp_path, "roles")
    page.click("nav >> text=Apps")
    page.get_by_text("No apps.").wait_for()
    shot(page, tmp_path, "apps")
    assert errors == []
    page.close()
    # The chart's data: each role's and framework's dominant share, sampled over time.
    with urllib.request.urlopen(local.url + "/api/shares", timeout=10) as reply:
        shares = json.load(reply)
    assert shares["at"] and "*" in shares["roles"] and "batch" in shares["frameworks"]
    assert len(shares["roles"]["*"]) == len(shares["at"])


def test_unknown_pages_and_ids_are_404s_not_tracebacks(local, browser):
    page = browser.new_page()
    reply = page.goto(local.url + "/no/such/page")
    assert reply.status == 404
    assert "There is no page at /no/such/page" in page.inner_text("body")
    page.goto(local.url + "/#/task/no-framework/no-task")
    page.get_by_test_id("error").filter(has_text="no task 'no-task'").wait_for()
    page.close()
    for path, status, message in [
        ("/api/tasks/fw/none", 404, "no task 'none' of framework 'fw'"),
        ("/api/frameworks/nobody/why", 404, "no framework 'nobody'"),
        ("/api/nothing", 404, "no such API"),
    ]:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(local.url + path, timeout=10)
        assert e.value.code == status
        assert message in json.load(e.value)["error"]


def test_the_roles_page_shows_what_a_guarantee_holds_back(local, browser):
    quota = agora(
        "cluster", "quota", "analytics", "--guarantee", "cpus:0.5;mem:64",
        "--master", local.address,
    )  # fmt: skip
    assert quota.returncode == 0, quota.stderr
    try:
        page = browser.new_page()
        page.goto(local.url + "/#/roles")
        row = page.get_by_test_id("roles").locator("tr", has_text="analytics")
        row.wait_for()
        headings = page.get_by_test_id("roles").locator("th").all_inner_texts()
        cells = row.locator("td").all_inner_texts()
        # Headings are upper-cased by the page's style.
        assert dict(zip(headings, cells, strict=True))["HELD BACK FOR IT"] == "cpus:0.5;mem:64"
        page.close()
    finally:
        cleared = agora("cluster", "quota", "analytics", "--master", local.address)
        assert cleared.returncode == 0, cleared.stderr
