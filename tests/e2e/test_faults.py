"""The fault matrix: the production shape (API, worker and janitor as separate processes, on a
private PostgreSQL and a private Redis that the tests stop and start) under crashes, outages and
duplicates. For each: the job ends in a defined state within a stated time, nothing is lost or
half-written (no artifact row without its file, no file without its row, no scratch left), no
job runs twice, and the service keeps answering."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from core.db.models import Artifact, Job, JobEvent, Model
from core.dispatch import JobDispatcher
from core.job_config import JobConfig
from optimizer.testing.models import model_bytes, small_cnn
from tests.e2e.flows import upload
from tests.e2e.stacks import Stack, running_stack
from tests.support.private_services import PrivatePostgres, PrivateRedis, private_postgres, private_redis
from tests.support.processes import wait_for_job
from tests.support.waiting import POLL_S, wait_until

pytestmark = pytest.mark.e2e

STALE_AFTER_S = 10
DATABASE_RETRY_S = 20  # a running job's writes wait this long for the database
FAST = {"benchmark": {"warmup": 1, "iterations": 3, "measure_memory": False},
        "validation": {"samples": 2}}
SLOW = {"benchmark": {"warmup": 0, "iterations": 10000, "measure_memory": False},
        "validation": {"samples": 2}}


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    with private_postgres() as postgres, private_redis(tmp_path_factory.mktemp("redis")) as broker:
        yield postgres, broker


@pytest.fixture(scope="module")
def stack(services: tuple[PrivatePostgres, PrivateRedis],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    postgres, broker = services
    with running_stack(tmp_path_factory.mktemp("faults"), name="faults", redis_url=broker.url,
                       queues="cpu", database_url=postgres.url, janitor=True,
                       FUSEFORGE_JOBS__STALE_AFTER_S=str(STALE_AFTER_S),
                       FUSEFORGE_JOBS__DATABASE_RETRY_S=str(DATABASE_RETRY_S),
                       FUSEFORGE_JOBS__HEARTBEAT_INTERVAL_S="1",
                       FUSEFORGE_JANITOR__INTERVAL_S="1",
                       FUSEFORGE_JANITOR__REQUEUE_AFTER_S="5",
                       FUSEFORGE_JANITOR__UPLOAD_STALE_S="3") as running:
        yield running


@pytest.fixture
def live(stack: Stack, services: tuple[PrivatePostgres, PrivateRedis]) -> Iterator[Stack]:
    """The stack with every part up before and after the test (a test may take one down)."""
    _ensure_up(stack, services)
    yield stack
    _ensure_up(stack, services)
    _assert_nothing_half_written(stack)


def _ensure_up(stack: Stack, services: tuple[PrivatePostgres, PrivateRedis]) -> None:
    postgres, broker = services
    for server in (postgres, broker):
        try:
            server.start()
        except Exception:
            pass  # already running
    for role in ("worker", "janitor", "api"):
        service = getattr(stack, role)
        if service is None or service.process.poll() is not None:
            stack.restart(role)


def _job(stack: Stack, model_id: str, **config: Any) -> str:
    response = httpx.post(f"{stack.base_url}/v1/jobs", json={"model_id": model_id, **config},
                          timeout=30)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _cnn(stack: Stack, seed: int) -> str:
    return str(upload(stack.base_url, model_bytes(small_cnn(seed=seed)), "cnn.onnx")["id"])


def _wait_stage(stack: Stack, job_id: str, stage: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while (job := httpx.get(f"{stack.base_url}/v1/jobs/{job_id}", timeout=10).json())["stage"] != stage:
        assert job["status"] in ("queued", "running"), job
        assert time.monotonic() < deadline, f"job never reached {stage}: {job}"
        time.sleep(0.1)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _job_process(stack: Stack, job_id: str) -> int:
    """The pid of the process running job `job_id` (worker/supervision/job_process.py): a child of
    the pool process's job template (worker/supervision/job_template.py), whose command line the
    child inherits."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        forked = stack.worker.descendant_pids("core.process_template")
        for pid in forked:
            try:
                if _parent(pid) in forked:
                    return pid
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
        time.sleep(0.1)
    raise AssertionError(f"no process runs job {job_id}")


def _assert_nothing_half_written(stack: Stack) -> None:
    """Every artifact row has its file, every stored file its row, and no scratch is left
    (once the janitor has had a round)."""
    engine = create_engine(stack.database_url)
    deadline = time.monotonic() + 30
    try:
        while True:
            with Session(engine) as session:
                rows = {a.uri.removeprefix("store://") for a in session.scalars(select(Artifact))}
                running = {str(j) for j in session.scalars(
                    select(Job.id).where(Job.status.in_(["queued", "running"])))}
            jobs_dir = stack.data_dir / "artifacts" / "jobs"
            # jobs/<id>/<attempt>/<name>: each claim of a job stores apart
            files = ({p.relative_to(jobs_dir.parent).as_posix() for p in jobs_dir.glob("*/*/*")}
                     if jobs_dir.is_dir() else set())
            scratch = stack.data_dir / "scratch"
            leftovers = [p.name for p in scratch.iterdir()
                         if p.name.split(".")[0] not in running] if scratch.is_dir() else []
            stray_files = {f for f in files if f.split("/")[1] not in running} - rows
            if not stray_files and not leftovers and rows <= files:
                return
            assert time.monotonic() < deadline, (
                f"half-written: rows without files {rows - files}, files without rows "
                f"{stray_files}, scratch left {leftovers}")
            time.sleep(POLL_S)
    finally:
        engine.dispose()


def _retried_and_acknowledged(stack: Stack, job_id: str) -> bool:
    """The worker took job `job_id`'s message (it logged a claim retry) and no longer holds it
    (Celery's acks_late keeps a running task's message in Redis's `unacked` hash). Only this
    job's message counts: another task (a webhook delivery of an earlier test's job) may be
    held through the outage too."""
    if f"job {job_id}: database unavailable" not in stack.worker.output():
        return False
    broker = redis.Redis.from_url(stack.broker_url)
    try:
        held = [*broker.lrange("cpu", 0, -1), *broker.hvals("unacked")]
    finally:
        broker.close()
    return not any(job_id.encode() in message for message in held)


def _claims(stack: Stack, job_id: str) -> int:
    events = httpx.get(f"{stack.base_url}/v1/jobs/{job_id}", timeout=10).json()["events"]
    return sum(e["message"].startswith("claimed by worker") for e in events)


def test_killing_the_jobs_process_fails_that_job_at_once_and_the_next_runs(live: Stack) -> None:
    model = _cnn(live, 41)
    job_id = _job(live, model, **SLOW)
    _wait_stage(live, job_id, "benchmark")
    killed_at = time.monotonic()
    os.kill(_job_process(live, job_id), signal.SIGKILL)
    job = wait_for_job(live.base_url, job_id, timeout=30)

    assert job["status"] == "failed" and job["error"]["code"] == "WorkerProcessDied"
    assert "died in stage 'benchmark'" in job["error"]["message"]
    assert time.monotonic() - killed_at < 30
    assert wait_for_job(live.base_url, _job(live, model, **FAST))["status"] == "succeeded"


def test_killing_the_pool_process_fails_its_job_on_redelivery(live: Stack) -> None:
    model = _cnn(live, 42)
    job_id = _job(live, model, **SLOW)
    _wait_stage(live, job_id, "benchmark")
    pool = _parent(_parent(_job_process(live, job_id)))  # the parent of the job's template
    killed_at = time.monotonic()
    os.kill(pool, signal.SIGKILL)
    job = wait_for_job(live.base_url, job_id, timeout=60)

    assert job["status"] == "failed" and job["error"]["code"] == "WorkerProcessDied", job["error"]
    assert time.monotonic() - killed_at < 60  # not left to the stale sweep
    assert wait_for_job(live.base_url, _job(live, model, **FAST))["status"] == "succeeded"


def _events(stack: Stack, job_id: str) -> list[str]:
    job = httpx.get(f"{stack.base_url}/v1/jobs/{job_id}", timeout=10).json()
    return [event["message"] for event in job["events"]]


def _search_past_its_first_candidate(stack: Stack, seed: int) -> str:
    """A search job of several fp32 candidates, once its first is judged and recorded."""
    job_id = _job(stack, _cnn(stack, seed), search={"backends": ["onnxruntime"], "precisions": ["fp32"],
                                                    "time_budget_s": 300},
                  validation={"samples": 64})
    wait_until(lambda: any(m.startswith("candidate fp32/all: timed")
                           for m in _events(stack, job_id)), 120,
               what="the search's first candidate to be judged")
    return job_id


def test_killing_a_searchs_process_resumes_the_search_at_its_next_candidate(live: Stack) -> None:
    job_id = _search_past_its_first_candidate(live, 46)
    os.kill(_job_process(live, job_id), signal.SIGKILL)
    job = wait_for_job(live.base_url, job_id, timeout=300)

    assert job["status"] == "succeeded", job["error"]
    messages = [event["message"] for event in job["events"]]
    assert any("the search resumes at its next candidate" in m for m in messages)
    report = job["search_report"]
    assert "fp32/all" in report["resumed"]  # judged before the kill: not built again to judge
    assert sum(m.startswith("candidate fp32/all: timed") for m in messages) == 1
    # a winner, or the original when no candidate beat it: either way, decided once
    assert (report["winner"] or report["original"]) and _claims(live, job_id) == 1


def test_the_job_of_a_worker_that_died_whole_is_sent_again_once_then_fails(
        live: Stack) -> None:
    model = _cnn(live, 43)
    job_id = _job(live, model, **SLOW)
    _wait_stage(live, job_id, "benchmark")
    live.worker.stop(signal.SIGKILL)  # main process, pool and job process: nothing left to tell
    wait_until(lambda: any("sent again to the next worker" in m for m in _events(live, job_id)),
               STALE_AFTER_S + 60, what="the janitor to send the lost job again")
    live.restart("worker")
    wait_until(lambda: _events(live, job_id).count("stage benchmark started") == 2, 180,
               what="the job to start over on the new worker and reach its benchmark")
    killed_at = time.monotonic()
    live.worker.stop(signal.SIGKILL)  # its one resend (FUSEFORGE_JOBS__LOST_WORKER_RESENDS) used
    job = wait_for_job(live.base_url, job_id, timeout=STALE_AFTER_S + 60)

    assert job["status"] == "failed" and job["error"]["code"] == "WorkerLost"
    assert time.monotonic() - killed_at < STALE_AFTER_S + 30
    assert _claims(live, job_id) == 2


def test_a_search_on_a_worker_that_died_whole_resumes_on_the_next_worker(
        live: Stack, services: tuple[PrivatePostgres, PrivateRedis]) -> None:
    job_id = _search_past_its_first_candidate(live, 47)
    live.worker.stop(signal.SIGKILL)  # main process, pool and job process
    wait_until(lambda: any("resumes at its next candidate on the next worker" in m
                           for m in _events(live, job_id)), STALE_AFTER_S + 60,
               what="the janitor to requeue the search")
    _ensure_up(live, services)  # the next worker
    job = wait_for_job(live.base_url, job_id, timeout=300)

    assert job["status"] == "succeeded", job["error"]
    assert "fp32/all" in job["search_report"]["resumed"]
    assert _claims(live, job_id) == 2


def test_the_same_message_six_times_runs_the_job_once(live: Stack) -> None:
    model = _cnn(live, 44)
    job_id = _job(live, model, **FAST)
    dispatcher = JobDispatcher(live.broker_url)
    for _ in range(5):
        dispatcher.send_job(uuid.UUID(job_id), JobConfig())
    job = wait_for_job(live.base_url, job_id)
    wait_until(lambda: live.worker.output().count(
        f"job {job_id} is not queued any more; skipping this delivery") >= 5, 30,
        what="the five duplicates to meet the finished job")

    assert job["status"] == "succeeded"
    assert _claims(live, job_id) == 1


def test_twenty_concurrent_uploads_of_one_file_and_twenty_submits(live: Stack) -> None:
    data = model_bytes(small_cnn(seed=45))
    with ThreadPoolExecutor(max_workers=20) as pool:
        models = list(pool.map(lambda _: upload(live.base_url, data, "cnn.onnx")["id"], range(20)))
        assert len(set(models)) == 1
        job_ids = list(pool.map(lambda _: _job(live, models[0], **FAST), range(20)))
    jobs = [wait_for_job(live.base_url, job_id, timeout=600) for job_id in job_ids]

    assert [j["status"] for j in jobs] == ["succeeded"] * 20
    assert all(_claims(live, job_id) == 1 for job_id in job_ids)


def test_redis_down_20_s_answers_503_and_the_worker_reconnects(
        live: Stack, services: tuple[PrivatePostgres, PrivateRedis]) -> None:
    _, broker = services
    model = _cnn(live, 46)
    broker.stop()
    try:
        refused = httpx.post(f"{live.base_url}/v1/jobs", json={"model_id": model, **FAST},
                             timeout=60)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "BrokerUnavailable"
        assert httpx.get(f"{live.base_url}/healthz", timeout=30).status_code == 503
        time.sleep(20)  # the outage itself (what the worker must outlast), not a wait for a state
    finally:
        broker.start()
    job = wait_for_job(live.base_url, _job(live, model, **FAST), timeout=180)
    assert job["status"] == "succeeded"
    assert _claims(live, job["id"]) == 1


def test_a_message_that_meets_a_postgres_outage_is_sent_again_by_the_janitor(
        live: Stack, services: tuple[PrivatePostgres, PrivateRedis]) -> None:
    postgres, _ = services
    model_id = _cnn(live, 47)
    engine = create_engine(live.database_url)
    with Session(engine, expire_on_commit=False) as session, session.begin():  # queued, unsent
        model = session.get_one(Model, uuid.UUID(model_id))
        config = JobConfig(input_shapes={"input": [1, 3, 32, 32]}, **FAST)  # type: ignore[arg-type]
        job = Job(project_id=model.project_id, model_id=model.id,
                  config=config.model_dump(mode="json"))
        session.add(job)
    engine.dispose()
    postgres.stop()
    try:
        JobDispatcher(live.broker_url).send_job(job.id, config)
        # The worker takes the message and retries the claim until it gives up (within
        # DATABASE_RETRY_S): the message is acknowledged, and only the database still knows the job.
        wait_until(lambda: _retried_and_acknowledged(live, str(job.id)), DATABASE_RETRY_S + 30,
                   what=lambda: "the worker to give the claim up:\n" + live.worker.output()[-3000:])
    finally:
        postgres.start()
    started = time.monotonic()
    done = wait_for_job(live.base_url, str(job.id), timeout=180)

    assert done["status"] == "succeeded", done["error"]
    assert any(e["message"].startswith("re-sent to queue 'cpu'") for e in done["events"])
    assert time.monotonic() - started < 120


def test_a_postgres_outage_during_a_job_is_survived_and_the_api_answers_503(
        live: Stack, services: tuple[PrivatePostgres, PrivateRedis]) -> None:
    postgres, _ = services
    model = _cnn(live, 48)
    # Long enough to be seen in its benchmark (the API caches a running job for 0.5 s), short
    # enough to end inside the outage.
    job_id = _job(live, model, benchmark={"warmup": 0, "iterations": 6000,
                                          "measure_memory": False})
    _wait_stage(live, job_id, "benchmark")
    postgres.stop()
    try:
        outage = time.monotonic()
        # (A model read: a running job's status may be served from the API's 0.5 s cache.)
        answer = httpx.get(f"{live.base_url}/v1/models/{model}", timeout=30)
        assert answer.status_code == 503 and "Retry-After" in answer.headers, answer.text
        assert answer.json()["error"] == "DatabaseUnavailable"
        # across the benchmark → store boundary, past the 10 s stale limit, within the 20 s its
        # writes wait
        time.sleep(max(0.0, 15 - (time.monotonic() - outage)))
    finally:
        postgres.start()
    job = wait_for_job(live.base_url, job_id, timeout=180)

    assert job["status"] == "succeeded", job["error"]
    assert _claims(live, job_id) == 1


def test_a_postgres_outage_longer_than_a_jobs_retries_queues_it_again_once_it_is_back(
        live: Stack, services: tuple[PrivatePostgres, PrivateRedis]) -> None:
    postgres, _ = services
    model = _cnn(live, 50)
    job_id = _job(live, model, benchmark={"warmup": 0, "iterations": 6000,
                                          "measure_memory": False})
    _wait_stage(live, job_id, "benchmark")
    postgres.stop()
    try:
        # the job's next write (its next stage) gives up after DATABASE_RETRY_S: its process
        # ends, and its supervisor waits for the database
        wait_until(lambda: "waiting for it to queue the job again" in live.worker.output(),
                   DATABASE_RETRY_S + 60, what=lambda: "the supervisor to wait the outage out:\n"
                   + live.worker.output()[-3000:])
    finally:
        postgres.start()
    job = wait_for_job(live.base_url, job_id, timeout=240)

    assert job["status"] == "succeeded", job["error"]
    assert _claims(live, job_id) == 2  # run again from the start, not failed
    requeued = [e for e in job["events"]
                if e["message"].startswith("queued again after a database outage")]
    assert len(requeued) == 1, job["events"]
    assert "OperationalError" in requeued[0]["message"]


def test_cancel_during_ablation_frees_the_worker_within_seconds(live: Stack) -> None:
    model = _cnn(live, 49)
    job_id = _job(live, model, ablation=True, **SLOW)
    _wait_stage(live, job_id, "ablation")
    cancelled_at = time.monotonic()
    assert httpx.post(f"{live.base_url}/v1/jobs/{job_id}/cancel", timeout=10).status_code == 200
    next_id = _job(live, model, **FAST)
    deadline = time.monotonic() + 60
    while httpx.get(f"{live.base_url}/v1/jobs/{next_id}", timeout=10).json()["started_at"] is None:
        assert time.monotonic() < deadline, "the next job never started"
        time.sleep(0.1)
    assert time.monotonic() - cancelled_at < 15  # not after the ablation's hour
    assert wait_for_job(live.base_url, next_id)["status"] == "succeeded"
    assert not (live.data_dir / "scratch" / job_id).exists()


def test_an_upload_cut_off_by_an_api_crash_leaves_no_file(live: Stack) -> None:
    uploads = live.data_dir / "artifacts" / "models"  # a hidden partial object while it streams in

    def partial_writes() -> list[Path]:
        return [path for path in uploads.iterdir() if path.name.endswith(".partial")] \
            if uploads.is_dir() else []

    stop = threading.Event()

    def trickle() -> Iterator[bytes]:
        yield b"\x08\x07" + b"\0" * 65536
        while not stop.wait(0.1):
            yield b"\0" * 1024

    def send() -> None:
        try:
            httpx.post(f"{live.base_url}/v1/models?name=cut.onnx", content=trickle(),
                       headers={"Content-Type": "application/octet-stream"}, timeout=30)
        except httpx.HTTPError:
            pass  # the API died under it

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 30
    while not partial_writes():
        assert time.monotonic() < deadline, "the upload never reached the artifact folder"
        time.sleep(0.05)
    live.api.stop(signal.SIGKILL)
    stop.set()
    sender.join()
    live.restart("api")
    deadline = time.monotonic() + 30
    while partial_writes():  # the janitor's round, once the write is 3 s old
        assert time.monotonic() < deadline, f"left behind: {partial_writes()}"
        time.sleep(POLL_S)
    with Session(create_engine(live.database_url)) as session:
        assert session.scalar(select(Model).where(Model.name == "cut.onnx")) is None
        _ = session.scalars(select(JobEvent)).first()
