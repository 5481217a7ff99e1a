"""The web dashboard in a real browser (Debian's chromium, driven by Playwright) on `agora local`.

Set AGORA_SCREENSHOTS=DIR to keep a screenshot of every page there (docs/figures/dashboard is
made that way).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from e2e_framework import Recorder, running
from harness import ROOT, Daemon, eventually

from agora.frameworks.sdk import TaskSpec

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


@contextlib.contextmanager
def holder(master: str, name: str = "holder"):
    """A framework that keeps every offer it gets (and launches what it is told), on an event
    loop of its own thread (these tests are plain functions); `call(coroutine)` runs there."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="holder", daemon=True)
    thread.start()

    def call(coroutine, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout)

    framework = Recorder()
    block = running(framework, master, name=name)
    call(block.__aenter__())
    try:
        yield framework, call
    finally:
        call(block.__aexit__(None, None, None))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


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
    assert page.get_by_test_id("held-back-note").count() == 0
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
    finished = page.get_by_test_id("tasks").locator("tbody tr", has_text="FINISHED")
    finished.nth(1).wait_for()
    page.get_by_test_id("filter-state").select_option("FINISHED")
    page.wait_for_url(re.compile(r"state=FINISHED"))
    shot(page, tmp_path, "tasks")
    finished.first.locator("a").first.click()  # the task (then its framework, its agent)
    page.get_by_test_id("log").filter(has_text="hello-from-the-dashboard").wait_for()
    assert page.get_by_test_id("files").locator("text=stdout").count() == 1
    shot(page, tmp_path, "task")

    nightly = agora(
        "job", "schedule", "--master", local.address, "nightly", "--cron", "0 3 * * *",
        "--timezone", "Europe/Paris", "--", "true",
    )  # fmt: skip
    assert nightly.returncode == 0, nightly.stdout + nightly.stderr
    page.click("nav >> text=Jobs")
    page.get_by_test_id("jobs").locator("tr", has_text="greet").wait_for()
    assert "SUCCEEDED" in page.get_by_test_id("jobs").inner_text()
    schedule = page.get_by_test_id("schedules").locator("tr", has_text="nightly")
    assert "0 3 * * * (Europe/Paris)" in schedule.inner_text()
    assert "active" in schedule.inner_text()
    assert page.get_by_test_id("owners").count() == 1
    shot(page, tmp_path, "jobs")
    page.get_by_test_id("jobs").locator("tr", has_text="greet").get_by_role("link").click()
    instances = page.get_by_test_id("job-instances").locator("tbody tr")
    instances.nth(1).wait_for()
    # Shown as the command line shows them (SUCCEEDED), the full name kept as the class.
    assert instances.locator("span.state-INSTANCE_SUCCEEDED", has_text="SUCCEEDED").count() == 2
    job_state = page.get_by_test_id("job").locator("span.state-JOB_SUCCEEDED")
    assert job_state.inner_text() == "SUCCEEDED"
    shot(page, tmp_path, "job")
    assert instances.first.locator("td").nth(7).inner_text() != "-"  # its peak memory
    instances.first.get_by_role("link").first.click()  # its task's page, with its output
    page.get_by_test_id("log").filter(has_text="hello-from-the-dashboard").wait_for()

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
    assert shares["at"] and "*" in shares["roles"]
    # Keyed by framework id, labelled with the name and a short id.
    [batch] = [k for k, label in shares["labels"].items() if label.startswith("batch (")]
    assert (
        batch.startswith("framework-") and batch[len("framework-") :][:6] in shares["labels"][batch]
    )
    assert len(shares["roles"]["*"]) == len(shares["at"]) == len(shares["frameworks"][batch])


def test_the_share_history_labels_framework_ids_while_they_are_charted():
    from agora.master.dashboard import ShareHistory

    history = ShareHistory(window=2.0, interval=1.0)
    history.add(1.0, {}, {"framework-a1": 0.1}, {"framework-a1": "batch (a1)"})
    history.add(2.0, {}, {"framework-b2": 0.2}, {"framework-b2": "batch (b2)"})
    assert history.series()["labels"] == {
        "framework-a1": "batch (a1)",
        "framework-b2": "batch (b2)",
    }
    history.add(3.0, {}, {"framework-b2": 0.3})  # framework-a1 leaves the window
    series = history.series()
    assert series["frameworks"] == {"framework-b2": [0.2, 0.3]}
    assert series["labels"] == {"framework-b2": "batch (b2)"}


def test_the_share_chart_keeps_each_framework_id_its_own_line_on_a_time_axis(
    local, browser, tmp_path
):
    """Two frameworks of one name, one after the other, with a stretch of no samples (a master
    that was down) between: two lines, neither drawn across the other's time or the gap, under
    a time axis labelled in local time."""
    t0 = 1_800_000_000.0  # a whole minute
    at = [t0 + 2 * i for i in range(60)] + [t0 + 300 + 2 * i for i in range(60)]
    first = [0.1] * 60 + [None] * 60
    second = [None] * 70 + [0.3] * 50
    shares = {
        "at": at,
        "interval": 2.0,
        "roles": {"*": [0.1] * 60 + [0.3] * 60},
        "frameworks": {"framework-aaaaaa111111": first, "framework-bbbbbb222222": second},
        "labels": {
            "framework-aaaaaa111111": "batch (aaaaaa)",
            "framework-bbbbbb222222": "batch (bbbbbb)",
        },
    }
    page = browser.new_page()
    page.route("**/api/shares", lambda route: route.fulfill(json=shares))
    page.goto(local.url + "/")
    svg = page.get_by_test_id("chart-frameworks")
    svg.locator("polyline").first.wait_for(state="attached")  # a flat line has no height
    legend = page.get_by_test_id("legend-frameworks").inner_text()
    assert "batch (aaaaaa)" in legend and "batch (bbbbbb)" in legend

    def spans(series: str) -> list[tuple[float, float]]:
        lines = svg.locator(f'polyline[data-series="{series}"]')
        out = []
        for i in range(lines.count()):
            xs = [float(p.split(",")[0]) for p in lines.nth(i).get_attribute("points").split()]
            out.append((min(xs), max(xs)))
        return out

    [a] = spans("framework-aaaaaa111111")
    b = spans("framework-bbbbbb222222")
    assert len(b) == 1 and a[1] < b[0][0]  # one line each, the second after the first
    # The roles' line breaks at the stretch with no samples rather than crossing it.
    assert len(page.get_by_test_id("chart-roles").locator("polyline").all()) == 2
    # A tick a minute over the ~7 minutes shown, each at a whole minute, labelled as the
    # browser's local clock reads it.
    ticks = svg.locator("text.tick[data-at]")
    stamps = [float(ticks.nth(i).get_attribute("data-at")) for i in range(ticks.count())]
    assert len(stamps) >= 6 and all(t % 60 == 0 for t in stamps)
    local_time = page.evaluate(
        "t => new Date(t * 1000).toLocaleTimeString([], {hour: '2-digit', minute: '2-digit'})",
        stamps[0],
    )
    assert ticks.first.text_content() == local_time
    shot(page, tmp_path, "share-chart")
    page.close()


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
        ("/api/agents/nowhere", 404, "no agent 'nowhere'"),
        ("/api/frameworks/nobody", 404, "no framework 'nobody'"),
        ("/api/jobs/job-none", 404, "job-none"),
        ("/api/apps/none", 404, "none"),
    ]:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(local.url + path, timeout=10)
        assert e.value.code == status
        assert message in json.load(e.value)["error"]
    # An action is a POST of JSON only: a form another site's page posts is refused (415).
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(local.url + "/api/agents/any/drain", data=b"x=1", timeout=10)
    assert e.value.code == 415 and "POST of JSON" in json.load(e.value)["error"]


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
        # The overview says so, and the offers page what quota keeps from everyone, and that
        # no one asked for it.
        page.click("nav >> text=Overview")
        note = page.get_by_test_id("held-back-note")
        assert "cpus:0.5;mem:64 for role analytics" in note.inner_text()
        page.click("nav >> text=Offers")
        held = page.get_by_test_id("held-back").locator("tr", has_text="analytics")
        held.wait_for()
        assert "cpus:0.5;mem:64" in held.inner_text() and "none in this role" in held.inner_text()
        # Preemption is off on this cluster: the page says so.
        assert "No task has been preempted" in page.get_by_test_id("preemptions").inner_text()
        page.close()
    finally:
        cleared = agora("cluster", "quota", "analytics", "--master", local.address)
        assert cleared.returncode == 0, cleared.stderr


def test_an_operator_follows_offers_to_a_framework_and_an_agent(local, browser, tmp_path):
    """The offers page names who holds what; a framework's page and an agent's page (linked
    from the lists) show its tasks, offers and "why no offers", and what each framework uses."""
    with holder(local.address) as (framework, call):
        spec = TaskSpec(name="napper", task_id="nap-1", cpus=0.1, mem=16, command="sleep 60")
        call(framework.launch(spec))
        call(framework.wait_state("nap-1", "TASK_RUNNING"))
        eventually(lambda: framework.offers, timeout=30, message="an offer held")
        fid = framework.framework_ids[-1]
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(local.url + "/#/offers")
        held = page.get_by_test_id("offers").locator("tbody tr", has_text="holder")
        held.first.wait_for()
        assert "s (rescinded at" in held.first.inner_text()  # how old, and until when
        shot(page, tmp_path, "offers")

        page.click("nav >> text=Frameworks")
        page.get_by_test_id("frameworks").get_by_role("link", name="holder").click()
        page.wait_for_url(re.compile(f"#/framework/{fid}$"))
        page.get_by_test_id("framework-tasks").locator("tr", has_text="nap-1").wait_for()
        assert page.get_by_test_id("framework-offers").locator("tbody tr").count() >= 1
        page.get_by_test_id("framework-why").locator("li").first.wait_for()
        facts = page.get_by_test_id("framework").inner_text()
        assert "ROLE\t*\n" in facts and fid in facts  # headings upper-cased by the style
        shot(page, tmp_path, "framework")

        agent_id = framework.launched["nap-1"]
        with urllib.request.urlopen(f"{local.url}/api/agents/{agent_id}", timeout=10) as reply:
            host = json.load(reply)["hostname"]
        page.click("nav >> text=Agents")
        page.get_by_test_id("agents").locator("tr", has_text=host).get_by_role("link").click()
        page.get_by_test_id("agent-tasks").locator("tr", has_text="nap-1").wait_for()
        uses = page.get_by_test_id("agent-frameworks").locator("tr", has_text="holder (")
        assert "cpus:0.1" in uses.inner_text()
        assert "ACTIVE" in page.get_by_test_id("agent").inner_text()
        shot(page, tmp_path, "agent")

        # Actions, each confirmed first: drain the agent and undrain it; kill the task.
        questions: list[str] = []
        page.on("dialog", lambda d: (questions.append(d.message), d.accept()))
        try:
            page.get_by_test_id("drain").click()
            page.get_by_test_id("done").filter(has_text="draining").wait_for()
            page.get_by_test_id("agent").filter(has_text="drained").wait_for()
            shot(page, tmp_path, "agent-drained")
        finally:
            page.get_by_test_id("undrain").click()
        page.get_by_test_id("done").filter(has_text="active again").wait_for()
        page.get_by_test_id("agent-tasks").get_by_role("link", name="nap-1").click()
        page.get_by_test_id("kill").click()
        page.get_by_test_id("done").filter(has_text="task nap-1 of holder (").wait_for()
        call(framework.wait_state("nap-1", "TASK_KILLED"))
        assert [q.split("?")[0] for q in questions] == [
            f"Drain {host}",
            f"Offer {host}'s resources again",
            "Kill task nap-1 of holder",
        ]
        assert errors == []
        page.close()

    # Its offers go back when it leaves.
    def released() -> bool:
        with urllib.request.urlopen(local.url + "/api/offers", timeout=10) as reply:
            return not any(o["framework_id"] == fid for o in json.load(reply)["offers"])

    eventually(released, timeout=30, message="the holder's offers returned")


def test_an_app_has_a_page_with_its_instances(local, browser, tmp_path):
    app = tmp_path / "sleeper.json"
    app.write_text(json.dumps({"id": "sleeper", "cmd": "sleep 600", "instances": 1, "cpus": 0.1,
                               "mem": 16}))  # fmt: skip
    put = agora("app", "put", str(app), "--master", local.address)
    assert put.returncode == 0, put.stdout + put.stderr
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(local.url + "/#/apps")
        page.get_by_test_id("apps").get_by_role("link", name="sleeper").click()
        page.wait_for_url(re.compile("#/app/sleeper$"))
        running = page.get_by_test_id("app-tasks").locator("tr", has_text="RUNNING")
        running.first.wait_for()
        assert "1 wanted" in page.get_by_test_id("app").inner_text()
        assert "null" not in page.inner_text("main")
        shot(page, tmp_path, "app")
        page.on("dialog", lambda d: d.accept())
        page.get_by_test_id("instances").fill("2")
        page.get_by_test_id("scale").click()
        page.get_by_test_id("done").filter(has_text="app sleeper: scaling to 2").wait_for()
        page.get_by_test_id("app").filter(has_text="2 wanted").wait_for()
        running.first.get_by_role("link").first.click()
        page.wait_for_url(re.compile("#/task/framework-[0-9a-f]+/"))
        page.get_by_test_id("task").locator("span.state-TASK_RUNNING").wait_for()
        page.close()
    finally:
        deleted = agora("app", "delete", "sleeper", "--master", local.address)
        assert deleted.returncode == 0, deleted.stderr


def submit(local, *args: str) -> str:
    """`agora job submit ARGS` on the local cluster: the job's id."""
    made = agora("job", "submit", "--master", local.address, "--cpus", "0.1", "--mem", "16", *args)
    assert made.returncode == 0, made.stdout + made.stderr
    return made.stdout.strip().splitlines()[-1]


def job_status(local, job_id: str) -> dict:
    """The job as `agora job status --json` shows it."""
    shown = agora("job", "status", job_id, "--json", "--master", local.address)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return json.loads(shown.stdout)


def post(url: str, body: dict) -> tuple[int, dict]:
    """POST `body` as JSON, as the page's actions do: (status, JSON answer)."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_a_job_page_shows_what_it_waits_for_and_holds_releases_and_kills_it(
    local, browser, tmp_path
):
    """A child waits for its parent, which waits for its begin time: the child's page says
    why and links to the parent; on the parent's page a person holds, releases, updates and
    kills it, each change seen by `agora job status`, each refusal the batch framework's own."""
    parent = submit(local, "--name", "parent", "--owner", "alice", "--begin", "1h", "--", "true")
    child = submit(local, "--name", "child", "--owner", "alice", "--after", f"{parent}:ok",
                   "--", "true")  # fmt: skip
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    questions: list[str] = []
    page.on("dialog", lambda d: (questions.append(d.message), d.accept()))
    try:
        page.goto(f"{local.url}/#/job/{child}")
        facts = page.get_by_test_id("job")
        facts.filter(has_text="dependency").wait_for()  # its pending reason
        assert page.get_by_test_id("dependencies").inner_text() == f"{parent}:ok (not ended yet)"
        assert f"waiting for {parent} to succeed" in facts.inner_text()
        assert "WAITING" in facts.inner_text()
        shot(page, tmp_path, "job-waiting")
        page.get_by_test_id("dependencies").get_by_role("link").click()
        page.wait_for_url(re.compile(f"#/job/{parent}$"))
        facts.filter(has_text="begin-time").wait_for()
        assert "alice" in facts.inner_text()

        page.get_by_test_id("hold").click()
        page.get_by_test_id("done").filter(has_text=f"job {parent} held").wait_for()
        facts.filter(has_text="(held)").wait_for()
        assert job_status(local, parent)["held"] is True
        page.get_by_test_id("release").click()
        page.get_by_test_id("done").filter(has_text=f"job {parent} released").wait_for()
        assert not job_status(local, parent).get("held", False)
        # A release the page no longer offers (a page older than the job) changes nothing and
        # says so, as does a requeue of a job that has not started: the batch framework's own
        # refusals, worded as `agora job` shows them.
        status, answer = post(f"{local.url}/api/jobs/{parent}/release", {})
        assert status == 409, answer
        assert answer["error"].startswith(
            f"job {parent} is not held, so there is nothing to release: it starts when offers allow"
        )
        status, answer = post(f"{local.url}/api/jobs/{parent}/requeue", {})
        assert status == 409 and "only a RUNNING job can be requeued" in answer["error"]

        page.get_by_test_id("update-priority").fill("7")
        page.get_by_test_id("update").click()
        page.get_by_test_id("done").filter(has_text="priority 7, 1 instance(s)").wait_for()
        assert job_status(local, parent)["spec"]["priority"] == 7
        page.get_by_test_id("update-instances").fill("0")
        page.get_by_test_id("update").click()
        refused = page.get_by_test_id("refused")
        refused.filter(has_text="instances must be between 1 and").wait_for()
        shot(page, tmp_path, "job-refused")

        page.get_by_test_id("kill-job").click()
        page.get_by_test_id("done").filter(has_text=f"job {parent}: being killed").wait_for()
        facts.filter(has_text="KILLED").wait_for()
        # Its child is cancelled, saying why.
        page.goto(f"{local.url}/#/job/{child}")
        facts.filter(has_text="KILLED").wait_for()
        assert page.get_by_test_id("dependencies").inner_text() == f"{parent}:ok"
        assert f"cancelled: job {parent} ended KILLED" in facts.inner_text()
        assert page.get_by_test_id("job-actions").count() == 0  # nothing to do with it now
        assert [q.split("?")[0] for q in questions] == [
            "Hold job parent",
            "Release job parent",
            "Update job parent: priority 7",
            "Update job parent: instances 0",
            "Kill job parent",
        ]
        assert errors == []
    finally:
        page.close()
        agora("job", "kill", parent, "--master", local.address)


def test_a_schedules_runs_are_listed_and_it_is_suspended_and_deleted_from_its_page(
    local, browser, tmp_path
):
    made = agora(
        "job", "schedule", "--master", local.address, "ticker", "--cron", "* * * * * */2",
        "--cpus", "0.1", "--mem", "16", "--", "true",
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: d.accept())
    try:
        page.goto(local.url + "/#/jobs")
        page.get_by_test_id("schedules").get_by_role("link", name="ticker").click()
        page.wait_for_url(re.compile("#/schedule/ticker$"))
        runs = page.get_by_test_id("schedule-runs").locator("tbody tr")
        runs.filter(has_text="SUCCEEDED").first.wait_for(timeout=60_000)
        assert "* * * * * */2 (UTC)" in page.get_by_test_id("schedule").inner_text()
        shot(page, tmp_path, "schedule")

        page.get_by_test_id("suspend").click()
        page.get_by_test_id("done").filter(has_text="schedule ticker suspended").wait_for()
        page.get_by_test_id("schedule").filter(has_text="suspended").wait_for()
        listed = agora("job", "schedules", "ticker", "--json", "--master", local.address)
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout)["suspended"] is True
        status, answer = post(f"{local.url}/api/schedules/ticker/suspend", {})
        assert status == 409 and answer["error"] == "schedule ticker is suspended already"

        # A run's job has its page.
        runs.filter(has_text="SUCCEEDED").first.get_by_role("link").first.click()
        page.wait_for_url(re.compile("#/job/"))
        page.locator("h1", has_text="Job ticker").wait_for()
        page.go_back()
        page.get_by_test_id("delete-schedule").click()
        page.get_by_test_id("done").filter(has_text="schedule ticker deleted").wait_for()
        page.wait_for_url(re.compile("#/jobs$"))
        page.get_by_test_id("schedules").wait_for()
        assert "ticker" not in page.get_by_test_id("schedules").inner_text()
        assert errors == []
    finally:
        page.close()
        agora("job", "unschedule", "ticker", "--master", local.address)


def test_finished_jobs_are_listed_by_owner_and_an_owners_weight_is_set(local, browser, tmp_path):
    for owner in ("carol", "dave"):
        submit(local, "--name", f"by-{owner}", "--owner", owner, "--wait", "--", "true")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: d.accept())
    page.goto(local.url + "/#/jobs")
    page.get_by_test_id("history-link").click()
    history = page.get_by_test_id("history")
    history.locator("tr", has_text="by-dave").wait_for()
    page.get_by_test_id("filter-owner").fill("carol")
    page.get_by_test_id("filter-owner").press("Enter")
    page.wait_for_url(re.compile("owner=carol"))
    history.locator("tr", has_text="dave").wait_for(state="detached")
    row = history.locator("tbody tr", has_text="by-carol")
    headings = history.locator("th").all_inner_texts()
    cells = dict(zip(headings, row.locator("td").all_inner_texts(), strict=True))
    assert cells["OWNER"] == "carol" and cells["STATE"] == "SUCCEEDED" and cells["EXIT"] == "0"
    assert cells["AGENT"] in ("local-0", "local-1") and cells["START"] != "-"
    page.get_by_test_id("filter-since").fill("1d")
    page.get_by_test_id("filter-since").press("Enter")
    page.wait_for_url(re.compile("since=1d"))
    assert history.locator("tbody tr", has_text="by-carol").count() == 1
    shot(page, tmp_path, "history")
    page.get_by_test_id("filter-since").fill("soon")
    page.get_by_test_id("filter-since").press("Enter")
    page.get_by_test_id("error").filter(has_text="'soon' is not a duration").wait_for()

    page.goto(local.url + "/#/jobs")
    page.get_by_test_id("owner-name").fill("carol")
    page.get_by_test_id("owner-weight").fill("2")
    page.get_by_test_id("set-weight").click()
    page.get_by_test_id("done").filter(has_text="owner carol: weight 2").wait_for()
    page.get_by_test_id("owners").locator("tr", has_text="carol").filter(has_text="2").wait_for()
    page.get_by_test_id("owner-name").fill("carol")
    page.get_by_test_id("owner-weight").fill("0")
    page.get_by_test_id("set-weight").click()
    page.get_by_test_id("refused").filter(has_text="weight must be a number above 0").wait_for()
    assert errors == []
    page.close()


def test_a_dashboard_without_a_batch_framework_has_no_job_action():
    # On a thread of its own: the browser's (sync) Playwright holds this thread's event loop.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, _no_batch_framework()).result(timeout=60)


async def _no_batch_framework() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from agora.master.dashboard import Dashboard
    from agora.v1 import operator_pb2

    class NoBatch:
        async def state(self) -> operator_pb2.ClusterState:
            return operator_pb2.ClusterState()

    app = web.Application()
    app.add_routes(Dashboard(NoBatch()).routes())  # type: ignore[arg-type]
    async with TestClient(TestServer(app)) as client:
        listed = await client.get("/api/jobs")
        assert (await listed.json())["available"] is False
        for method, path, body in [
            ("get", "/api/jobs/job-1", None),
            ("get", "/api/job-history", None),
            ("get", "/api/schedules/nightly", None),
            ("post", "/api/jobs/job-1/hold", {}),
            ("post", "/api/jobs/job-1/update", {"priority": 1}),
            ("post", "/api/schedules/nightly/suspend", {}),
            ("post", "/api/owners/weight", {"owner": "carol", "weight": 2}),
        ]:
            reply = await getattr(client, method)(path, json=body)
            assert reply.status == 404, path
            assert (await reply.json())["error"] == "no batch framework is registered", path
