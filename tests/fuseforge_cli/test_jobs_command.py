"""`fuseforge jobs list | show | wait | download | cancel | logs` against a real API server,
run as a user runs them (a process of their own), and `fuseforge submit`'s dashboard link and
its Ctrl-C.

No worker runs the jobs: a test plays the worker's last step (`JobRecorder.succeed`, with
engine timings and artifact files of its choosing), so what the commands print is known."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core.db.models import Job as JobRow
from core.db.models import JobStatus
from core.settings import Settings
from core.storage import LocalArtifactStore
from fuseforge_cli.service_records import recorded_service
from fuseforge_client import FuseForgeClient
from optimizer.testing.models import small_cnn
from tests.support.api_server import ApiServer, running_api, server_database
from tests.support.broker import TEST_REDIS_URL
from tests.support.finished_jobs import timed
from worker.pipeline.records.recorder import JobRecorder
from worker.pipeline.results import JobOutcome

REPO = Path(__file__).resolve().parents[2]
ENGINE_BYTES = b"engine bytes " * 100


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with running_api(tmp_path_factory.mktemp("jobs"), broker_url=TEST_REDIS_URL) as server:
        yield server


@pytest.fixture(scope="module")
def database(api: ApiServer) -> Iterator[Engine]:
    with server_database(api) as engine:
        yield engine


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny-cnn.onnx"
    onnx.save(small_cnn(seed=uuid.uuid4().int % 1000), path)
    return path


@pytest.fixture(scope="module")
def finished(api: ApiServer, database: Engine, cnn: Path) -> str:
    """A job that succeeded with an engine of ENGINE_BYTES and a report, 2x the original."""
    with FuseForgeClient(api.base_url) as client:
        model = client.upload_model(cnn)
        job = client.submit_job(model.id, backend="onnxruntime", precision="fp16")
    store = LocalArtifactStore(api.data_dir / "artifacts")
    source = api.data_dir / "engine.onnx"
    source.write_bytes(ENGINE_BYTES)
    report = api.data_dir / "fusion_report.json"
    report.write_text('{"passes_run": []}')
    stored = [("engine.onnx", "engine", store.put_file(source, f"jobs/{job.id}/engine.onnx")),
              ("fusion_report.json", "report",
               store.put_file(report, f"jobs/{job.id}/fusion_report.json"))]
    recorder = JobRecorder(uuid.UUID(job.id), sessionmaker(database))
    assert recorder.claim("test-worker") is not None
    outcome = JobOutcome(benchmarks=[timed("original", 5.0, (4.9, 5.1)),
                                     timed("engine", 2.5, (2.45, 2.55))])
    assert recorder.succeed(outcome, stored=stored)
    return job.id


def _queued_job(api: ApiServer, cnn: Path) -> str:
    with FuseForgeClient(api.base_url) as client:
        model = client.upload_model(cnn)
        return client.submit_job(model.id, backend="onnxruntime", precision="fp32").id


def _env(api: ApiServer, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEFORGE_")}
    env.update(PYTHONPATH=str(REPO), FUSEFORGE_PORT=str(api.port), **extra)
    return env


def _jobs(api: ApiServer, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "jobs", *args],
                          capture_output=True, text=True, env=_env(api), cwd=cwd, timeout=120)


def test_list_shows_each_job_with_its_id_prefix_model_status_and_headline(
        api: ApiServer, finished: str) -> None:
    run = _jobs(api, "list", "--status", "succeeded")

    assert run.returncode == 0, run.stderr
    # FUSEFORGE_PORT alone finds the server, as it told the server where to listen.
    assert f"FuseForge server http://127.0.0.1:{api.port} (FUSEFORGE_PORT)" in run.stderr
    header, *rows = run.stdout.splitlines()
    assert header.split() == ["ID", "MODEL", "STATUS", "SHIPPED", "HEADLINE"]
    [row] = [r for r in rows if r.startswith(finished[:8])]
    assert "tiny-cnn.onnx" in row and "succeeded" in row and "onnxruntime" in row
    assert "Shipped the onnxruntime" in row
    assert all("succeeded" in r for r in rows)


def test_a_second_shell_with_no_settings_finds_the_running_service(
        api: ApiServer, finished: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    env = {k: v for k, v in _env(api).items() if k != "FUSEFORGE_PORT"}
    with recorded_service(Settings(env="test", data_dir=api.data_dir), api.base_url):
        run = subprocess.run([sys.executable, "-m", "fuseforge_cli.main", "jobs", "list"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path,
                             env={**env, "XDG_STATE_HOME": str(tmp_path / "state")})

    assert run.returncode == 0, run.stderr
    assert (f"FuseForge server {api.base_url} (the FuseForge service running here, pid "
            f"{os.getpid()}, data in {api.data_dir.resolve()})") in run.stderr
    assert finished[:8] in run.stdout


def test_list_filters_by_model_name_and_prints_json(api: ApiServer, finished: str) -> None:
    import json

    none = _jobs(api, "list", "--model", "no-such-model")
    assert none.returncode == 0 and none.stdout == "" and "no jobs match" in none.stderr

    listed = json.loads(_jobs(api, "list", "--model", "TINY-cnn", "--json").stdout)
    assert finished in [item["id"] for item in listed["items"]]


def test_show_gives_the_outcome_the_artifacts_and_the_dashboard_page(
        api: ApiServer, finished: str) -> None:
    run = _jobs(api, "show", finished[:6])

    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"job {finished} (tiny-cnn.onnx): succeeded"
    assert lines[1].strip().startswith("Shipped the onnxruntime")
    assert "  asked:    onnxruntime fp16" in lines
    assert any(line.startswith("  speed-up: 2.00x") for line in lines)
    assert any(line.startswith("  artifact: engine.onnx (engine, ") for line in lines)
    assert f"  page:     http://127.0.0.1:{api.port}/ui/jobs/{finished}" in lines


def test_an_unknown_or_malformed_job_id_fails_in_one_line(api: ApiServer, finished: str) -> None:
    absent = "0123" if not finished.startswith("0123") else "4567"
    missing = _jobs(api, "show", absent)
    assert missing.returncode == 1
    assert f"fuseforge jobs: JobNotFound: no job's id starts with '{absent}'" in missing.stderr

    malformed = _jobs(api, "show", "zz")
    assert malformed.returncode == 3
    assert "InvalidJobId: 'zz' is not a job id" in malformed.stderr


def test_download_writes_the_engine_and_checks_its_hash(api: ApiServer, finished: str,
                                                         tmp_path: Path) -> None:
    run = _jobs(api, "download", finished[:8], "-o", str(tmp_path / "out"))

    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "engine.onnx").read_bytes() == ENGINE_BYTES
    assert not (tmp_path / "out" / "fusion_report.json").exists()  # the engine only
    assert run.stdout.strip() == str(tmp_path / "out" / "engine.onnx")


def test_download_all_writes_the_tar_in_the_current_folder(api: ApiServer, finished: str,
                                                           tmp_path: Path) -> None:
    run = _jobs(api, "download", finished, "--all", cwd=tmp_path)

    assert run.returncode == 0, run.stderr
    with tarfile.open(tmp_path / f"job-{finished}-artifacts.tar") as tar:
        assert sorted(tar.getnames()) == ["engine.onnx", "fusion_report.json"]
    assert [p.name for p in tmp_path.iterdir()] == [f"job-{finished}-artifacts.tar"]


def test_a_missing_artifact_is_an_error_naming_the_job_and_never_replaces_a_good_file(
        api: ApiServer, finished: str, cnn: Path, tmp_path: Path) -> None:
    good = tmp_path / "engine.onnx"
    good.write_bytes(b"a good engine")

    named = _jobs(api, "download", finished, "model.plan", "-o", str(tmp_path))
    assert named.returncode == 1
    assert f"ArtifactNotFound: job {finished} has no artifact model.plan" in named.stderr

    queued = _queued_job(api, cnn)
    engine = _jobs(api, "download", queued, "-o", str(tmp_path))
    tar = _jobs(api, "download", queued, "--all", "-o", str(good))
    assert engine.returncode == 1 and f"job {queued} (queued) has no engine" in engine.stderr
    assert tar.returncode == 1 and "ArtifactNotFound" in tar.stderr
    assert good.read_bytes() == b"a good engine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["engine.onnx"]  # no partial file


def test_cancel_stops_a_queued_job_and_logs_prints_its_events(
        api: ApiServer, database: Engine, cnn: Path) -> None:
    queued = _queued_job(api, cnn)

    cancelled = _jobs(api, "cancel", queued[:10])
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"job {queued} cancelled"
    with Session(database) as session:
        assert session.get(JobRow, uuid.UUID(queued)).status == JobStatus.CANCELLED  # type: ignore[union-attr]

    again = _jobs(api, "cancel", queued)
    assert again.returncode == 1 and "409" in again.stderr

    logs = _jobs(api, "logs", queued, "--follow")
    assert logs.returncode == 0, logs.stderr
    # its end in the server's words: the outcome's headline (or "cancelled" from an older one)
    assert re.search(rf"job {queued} cancelled: (Cancelled: nothing shipped|cancelled)", logs.stderr)


def test_wait_exits_by_how_the_job_ended(api: ApiServer, finished: str, cnn: Path) -> None:
    succeeded = _jobs(api, "wait", finished[:8])
    assert succeeded.returncode == 0, succeeded.stderr
    assert f"job {finished} succeeded" in succeeded.stdout

    queued = _queued_job(api, cnn)
    _jobs(api, "cancel", queued)
    cancelled = _jobs(api, "wait", queued)
    assert cancelled.returncode == 1
    assert f"job {queued} cancelled" in cancelled.stderr


# The CLI as a terminal starts it, Ctrl-C live: a suite run in the background (`make test &`)
# starts with SIGINT ignored, and every process it starts inherits that.
_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); sys.argv[0] = 'fuseforge'; "
    "runpy.run_module('fuseforge_cli.main', run_name='__main__')")


def test_submit_links_the_dashboard_page_and_ctrl_c_leaves_the_job_running(
        api: ApiServer, database: Engine, cnn: Path) -> None:
    sessions = sessionmaker(database)
    with sessions() as session:
        before = set(session.scalars(select(JobRow.id)))
    cli = subprocess.Popen([sys.executable, "-c", _AS_FROM_A_TERMINAL, "submit", str(cnn),
                            "--wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=_env(api), cwd=REPO)
    try:
        job_id = _new_job(sessions, before)
        time.sleep(1.0)  # let it print the link and start following
        cli.send_signal(signal.SIGINT)
        _, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()

    assert cli.returncode == 130, stderr
    assert f"submitted: http://127.0.0.1:{api.port}/ui/jobs/{job_id}" in stderr
    assert f"`fuseforge jobs wait {str(job_id)[:8]}`" in stderr
    with sessions() as session:
        assert session.get(JobRow, job_id).status == JobStatus.QUEUED  # type: ignore[union-attr]


def _new_job(sessions: sessionmaker[Session], before: set[uuid.UUID]) -> uuid.UUID:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with sessions() as session:
            new = set(session.scalars(select(JobRow.id))) - before
        if new:
            [job_id] = new
            return job_id
        time.sleep(0.1)
    raise AssertionError("fuseforge submit created no job within 60 s")
