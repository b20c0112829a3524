"""FuseForge across hosts with no shared disk (network namespaces, bench/hosts.py): the API, the
janitor and two workers each on a host of its own with an empty data folder, PostgreSQL, Redis
and SeaweedFS on a services host. 20 jobs spread over both workers; one worker's host is killed
mid-job, and its job is sent again and ends once, on the other; afterwards every artifact row's
object exists and no object lacks a row. Every address is inside the namespaces the test made,
and it removes them when it ends."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from bench.hosts import BUCKET, Deployment, deployment, postgres_binary, upload_model
from bench.service.netns import host_lab_problem
from bench.service.seaweed import WeedMissing, weed_binary
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

STALE_AFTER_S = 8
JOBS = 20
# Long enough that a kill lands mid-job; short enough for 20 of them on two cores.
JOB = {"backend": "onnxruntime", "precision": "fp32", "input_shapes": {"input": [2, 3, 32, 32]},
       "benchmark": {"warmup": 2, "iterations": 300, "measure_memory": False},
       "validation": {"samples": 2}}


def _why_not() -> str | None:
    problem = host_lab_problem()
    if problem is not None:
        return problem
    try:
        weed_binary()
    except WeedMissing as missing:
        return str(missing)
    if postgres_binary("initdb") is None:
        return "PostgreSQL's server binaries are not installed"
    return None


@pytest.fixture(scope="module")
def hosts() -> Iterator[Deployment]:
    problem = _why_not()
    if problem is not None:
        pytest.skip(f"the many-hosts test needs network namespaces: {problem}")
    folder = Path(tempfile.mkdtemp(prefix="fuseforge-many-hosts-"))
    with deployment(folder, workers=2, settings={
            "FUSEFORGE_JOBS__STALE_AFTER_S": str(STALE_AFTER_S),
            "FUSEFORGE_JOBS__HEARTBEAT_INTERVAL_S": "1",
            "FUSEFORGE_JANITOR__INTERVAL_S": "1"}) as running:
        try:
            yield running
        finally:
            for log in sorted(folder.glob("*.log")):
                print(f"--- {log.name} (tail) ---\n{log.read_text(errors='replace')[-2500:]}")
    shutil.rmtree(folder, ignore_errors=True)


def _job(base_url: str, job_id: str) -> dict[str, Any]:
    return httpx.get(f"{base_url}/v1/jobs/{job_id}", timeout=30).json()  # type: ignore[no-any-return]


def _on(host: str, job: dict[str, Any]) -> bool:
    return str(job.get("worker") or "").startswith(f"{host}:")


def test_jobs_spread_over_two_worker_hosts_and_survive_losing_one(hosts: Deployment) -> None:
    base_url = hosts.base_url
    model_id = upload_model(base_url, seed=uuid.uuid4().int % 1000)
    ids = []
    for _ in range(JOBS):
        answer = httpx.post(f"{base_url}/v1/jobs", json={"model_id": model_id, **JOB}, timeout=60)
        assert answer.status_code == 202, answer.text
        ids.append(answer.json()["id"])
    lost_host, other_host = hosts.workers[1], hosts.workers[0]

    def running_on_lost_host() -> str | None:
        for job_id in ids:
            job = _job(base_url, job_id)
            if job["status"] == "running" and _on(lost_host.name, job) and job["stage"] in (
                    "validate", "benchmark", "profile"):
                return job_id
        return None

    # Once the lost host has finished one job, so both hosts have work to show.
    wait_until(lambda: any(_on(lost_host.name, j) and j["status"] == "succeeded"
                           for j in map(lambda i: _job(base_url, i), ids)), 300,
               what=f"{lost_host.name} to finish a job")
    victim = wait_until(running_on_lost_host, 300, interval_s=0.2,
                        what=f"a job running on {lost_host.name}")
    hosts.lab.remove_host(lost_host)  # its processes killed, its network gone
    killed_at = time.monotonic()

    jobs = wait_until(lambda: _all_final(base_url, ids), 900, interval_s=1,
                      what="all 20 jobs to end")

    assert [j["status"] for j in jobs] == ["succeeded"] * JOBS, [
        (j["id"], j["status"], j["error"]) for j in jobs if j["status"] != "succeeded"]
    resent = next(j for j in jobs if j["id"] == victim)
    messages = [event["message"] for event in resent["events"]]
    assert sum(m.startswith("claimed by worker") for m in messages) == 2
    assert sum(m == "succeeded" for m in messages) == 1  # it ended once
    assert any(f"({lost_host.name}:" in m and "sent again to the next worker" in m
               for m in messages), messages
    assert _on(other_host.name, resent)
    # Both hosts finished jobs: the lost one before it was lost
    assert {j["worker"].rsplit(":", 1)[0] for j in jobs} == {lost_host.name, other_host.name}
    assert time.monotonic() - killed_at < STALE_AFTER_S + 600

    _assert_every_row_has_its_object_and_every_object_a_row(hosts)
    for host in (hosts.api, hosts.janitor, other_host):  # nothing of a job on a host's disk
        artifacts = hosts.data_dir(host) / "artifacts"
        assert not artifacts.exists() or not any(p.is_file() for p in artifacts.rglob("*"))


def _all_final(base_url: str, ids: list[str]) -> list[dict[str, Any]] | None:
    jobs = [_job(base_url, job_id) for job_id in ids]
    if all(j["status"] in ("succeeded", "failed", "cancelled") for j in jobs):
        return jobs
    return None


def _assert_every_row_has_its_object_and_every_object_a_row(hosts: Deployment) -> None:
    engine = create_engine(hosts.database_url)
    try:
        with engine.connect() as connection:
            rows = {uri.removeprefix("store://") for (uri,) in connection.execute(text(
                "SELECT uri FROM artifacts WHERE expired_at IS NULL UNION "
                "SELECT storage_uri FROM models UNION SELECT storage_uri FROM datasets"))}
    finally:
        engine.dispose()
    keys = hosts.seaweed.keys(BUCKET)
    assert rows <= keys, f"rows without their object: {sorted(rows - keys)}"
    # An object stored for a job the lost host ran is the janitor's to remove.
    wait_until(lambda: hosts.seaweed.keys(BUCKET) <= rows, 60,
               what=lambda: f"objects without a row: {sorted(hosts.seaweed.keys(BUCKET) - rows)}")
