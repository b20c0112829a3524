"""Fixtures of the dashboard's browser tests: one real FuseForge (PostgreSQL database, Redis
broker, a worker and `fuseforge serve`, each its own process, API keys on) and one headless
Chromium for the whole tests/dashboard package, and per test a project of its own (a key made
as `fuseforge apikey create` makes one) signed in through the sign-in page.

Projects keep the tests apart on the one stack: each sees only its own models and jobs, so a
test can still find an empty jobs page after others ran jobs."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from core.api_keys import create_key, get_or_create_project
from core.db.models import Job
from core.db.session import make_engine
from core.job_config import JobConfig
from optimizer.testing.models import model_bytes, small_cnn
from tests.dashboard.browser import SCREENSHOT_DIR, launch_chromium, no_browser, sign_in
from tests.e2e.stacks import Stack, running_stack
from tests.support.api_keys import TEST_AUTH
from tests.support.broker import redis_url
from tests.support.waiting import POLL_S

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

__all__ = [
    "NOTES",
    "OpenPage",
    "Project",
    "Seeded",
    "dashboard_browser",
    "dashboard_stack",
    "insert_jobs",
    "new_project",
    "open_page",
    "fresh_project",
    "pytest_terminal_summary",
    "save_model",
    "seeded",
]

# Its own Redis database: the stack lives while other tests of the package use (and empty) the
# unit tests' broker database; tests/e2e use 12 to 14.
BROWSER_REDIS_URL = os.environ.get("FUSEFORGE_BROWSER_REDIS_URL", redis_url("browser"))
FINAL = ("succeeded", "failed", "cancelled")
# What the browser tests measured, printed at the end of the run (the screenshots' folder,
# the jobs page's weight and load time).
NOTES: list[str] = []
# The stack's HMAC secret, set (as production must) so that this process can make its keys.
_STACK_SECRET = TEST_AUTH.secret.get_secret_value() if TEST_AUTH.secret else ""


@dataclass
class Project:
    """A project on the stack with an API key; `api` calls the REST API with that key."""

    name: str
    key: str
    id: str
    base_url: str
    stack: Stack
    api: httpx.Client = field(repr=False)

    def upload(self, data: bytes, filename: str = "model.onnx") -> dict[str, Any]:
        response = self.api.post("/v1/models", files={"file": (filename, data)}, timeout=60)
        assert response.status_code in (200, 201), response.text
        return response.json()  # type: ignore[no-any-return]

    def submit(self, model_id: str, **config: Any) -> dict[str, Any]:
        response = self.api.post("/v1/jobs", json={"model_id": model_id, **config}, timeout=30)
        assert response.status_code == 202, response.text
        return response.json()  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.api.get(f"/v1/jobs/{job_id}", timeout=30)
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def wait_for_job(self, job_id: str, timeout: float = 240.0) -> dict[str, Any]:
        """Poll the job until it is final; fail naming where it stuck, with the worker's log."""
        deadline = time.monotonic() + timeout
        job = self.job(job_id)
        while job["status"] not in FINAL:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} still {job['status']} (stage {job['stage']}, "
                    f"{job.get('status_detail')}) after {timeout:.0f} s; worker log tail:\n"
                    + self.stack.worker.output()[-3000:])
            time.sleep(POLL_S)
            job = self.job(job_id)
        return job


def _apikey_create(stack: Stack, project: str) -> str:
    """A key of the new project `project`, made as `fuseforge apikey create` makes one (the
    same core.api_keys calls, with the stack's secret), in this process: a CLI start per test
    cost seconds (tests/e2e/test_api_keys.py covers the command itself)."""
    engine = make_engine(stack.database_url)
    try:
        with Session(engine) as session:
            row, _ = get_or_create_project(session=session, name=project)
            created = create_key(session=session, secret=_STACK_SECRET.encode(), project=row,
                                 name="browser")
            session.commit()
    finally:
        engine.dispose()
    return created.key


@pytest.fixture(scope="package")
def dashboard_browser() -> Iterator[Browser]:
    """The system's headless Chromium, driven by Playwright (skips where there is none)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        no_browser("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            yield browser
        finally:
            browser.close()
    NOTES.append(f"dashboard screenshots: {SCREENSHOT_DIR}")


@pytest.fixture(scope="package")
def dashboard_stack(dashboard_browser: Browser,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """FuseForge with API keys on: `fuseforge serve` (the API and the dashboard) and a CPU
    worker, on a fresh PostgreSQL database. Asks for the browser first, so a machine without
    one skips before starting anything."""
    with running_stack(tmp_path_factory.mktemp("dashboard"), name="dashboard",
                       redis_url=BROWSER_REDIS_URL, queues="cpu", FUSEFORGE_ENV="test",
                       FUSEFORGE_AUTH__ENABLED="true",
                       FUSEFORGE_AUTH__SECRET=_STACK_SECRET) as stack:
        yield stack


def new_project(stack: Stack, label: str) -> Project:
    name = f"{label}-{uuid.uuid4().hex[:6]}"
    key = _apikey_create(stack, name)
    api = httpx.Client(base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"})
    found = api.get("/v1/project", timeout=30)
    assert found.status_code == 200, found.text
    return Project(name=name, key=key, id=found.json()["id"], base_url=stack.base_url,
                   stack=stack, api=api)


@pytest.fixture
def fresh_project(dashboard_stack: Stack, request: pytest.FixtureRequest) -> Project:
    """A new project of this test alone (no models, no jobs) and its key."""
    return new_project(dashboard_stack, request.node.name[:24].replace("_", "-"))


OpenPage = Callable[..., "Page"]


@pytest.fixture
def open_page(dashboard_browser: Browser) -> Iterator[OpenPage]:
    """`open_page(project, path)`: a new browser (context: no cookies, empty cache) signed in
    with the project's key through the sign-in page, on `path`. Every page it opens must end
    the test without an uncaught JavaScript error."""
    contexts: list[BrowserContext] = []
    errors: list[str] = []

    def opener(project: Project, path: str = "/ui/jobs") -> Page:
        # bypass_csp: axe is injected as an inline script; the pages' own policy stays theirs.
        context = dashboard_browser.new_context(base_url=project.base_url, bypass_csp=True,
                                                accept_downloads=True,
                                                viewport={"width": 1280, "height": 900})
        context.set_default_timeout(15_000)
        context.on("page", lambda page: page.on(
            "pageerror", lambda err: errors.append(f"{page.url}: {err}")))
        contexts.append(context)
        page = context.new_page()
        sign_in(page, project.base_url, project.key, path)
        return page

    yield opener
    for context in contexts:
        context.close()
    assert not errors, "uncaught JavaScript errors on the pages:\n" + "\n".join(errors)


def insert_jobs(database_url: str, *, project_id: str, model_id: str, count: int) -> None:
    """`count` finished and unfinished jobs of the model, written straight to the database (as
    a long-lived project's history would be), newest last; no worker runs them."""
    config = JobConfig(input_shapes={"input": [1, 3, 32, 32]}).model_dump(mode="json")
    now = datetime.now(UTC)
    statuses = ["succeeded"] * 7 + ["failed", "cancelled", "queued"]
    rows = []
    for n in range(count):
        status = statuses[n % len(statuses)]
        created = now - timedelta(minutes=count - n)
        finished = status in FINAL
        rows.append({
            "id": uuid.uuid4(), "project_id": uuid.UUID(project_id),
            "model_id": uuid.UUID(model_id), "config": config, "status": status,
            "stage": "done" if status == "succeeded" else None,
            "progress": 1.0 if status == "succeeded" else 0.0,
            "error_code": "AccuracyMismatchError" if status == "failed" else None,
            "error_message": ("output 'logits' differs from the original beyond atol=1e-12"
                              if status == "failed" else None),
            "attempts": 1 if finished else 0, "created_at": created,
            "started_at": created + timedelta(seconds=2) if finished else None,
            "finished_at": created + timedelta(seconds=30) if finished else None,
        })
    engine = make_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(insert(Job), rows)
    finally:
        engine.dispose()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print what the browser tests measured and where their screenshots went."""
    if NOTES:
        terminalreporter.section("dashboard browser tests")
        for line in NOTES:
            terminalreporter.write_line(line)


@dataclass
class Seeded:
    """A project whose model has three jobs, submitted through the API when the first test
    asks for them, so the worker runs them while other tests go on: `ablation` (succeeds, with
    every chart), `plain` (succeeds) and `failed` (tolerance 1e-12: fails validation, with a
    localisation)."""

    project: Project
    model_id: str
    ablation: str
    plain: str
    failed: str

    def finished(self, job_id: str, status: str = "succeeded") -> dict[str, Any]:
        job = self.project.wait_for_job(job_id)
        assert job["status"] == status, (job["status"], job["error"])
        return job


@pytest.fixture(scope="package")
def seeded(dashboard_stack: Stack) -> Seeded:
    project = new_project(dashboard_stack, "seeded")
    model = project.upload(model_bytes(small_cnn(seed=21)), "seeded_cnn.onnx")
    quick = {"benchmark": {"warmup": 1, "iterations": 5, "measure_memory": False}}
    ablation = project.submit(model["id"], ablation=True, **quick)
    plain = project.submit(model["id"], **quick)
    # Folding BatchNorm into Conv reorders float arithmetic: equal to ~1e-6, never to 1e-12.
    failed = project.submit(model["id"], validation={"atol": 1e-12, "rtol": 0}, **quick)
    return Seeded(project=project, model_id=model["id"], ablation=ablation["id"],
                  plain=plain["id"], failed=failed["id"])


def save_model(directory: Path, name: str, seed: int) -> Path:
    """A small Conv+BatchNorm+Relu network with random weights, biases and BatchNorm statistics
    (optimizer/testing/models.py: small_cnn), written to `directory`/`name` for a file input."""
    path = directory / name
    path.write_bytes(model_bytes(small_cnn(seed=seed)))
    return path
