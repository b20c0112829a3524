"""FuseForge's read endpoints under load, side by side with a bare FastAPI app in the same run.

Starts `fuseforge serve` on a fresh data folder (embedded SQLite, or the PostgreSQL database and
Redis broker given), seeds finished jobs, and starts the bare app (bench/service/bare_app.py)
served the same way. Then, per connection count, it runs `wrk` against each target in turn,
interleaved for `--rounds` rounds, and prints the median requests/s, the ratio to the bare app's
async route (the first target: the yardstick; its sync route, a weaker one, is shown too),
p50/p99 latency and errors (socket errors and non-2xx answers). Meanwhile a thread writes a
job heartbeat every 100 ms, as a worker does, and reports how those writes fared.

    .venv/bin/python -m bench.service.http_load                          # embedded defaults
    .venv/bin/python -m bench.service.http_load --database-url postgresql+psycopg://... \\
        --broker-url redis://127.0.0.1:6379/9                            # PostgreSQL + Redis

Needs `wrk` (Debian: apt-get install wrk). Loopback only; every run is bounded by
--duration × targets × rounds × connection counts.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from bench.service.seed import seed_jobs
from bench.service.stack import (
    FUSEFORGE,
    free_port,
    fuseforge_env,
    start,
    start_fuseforge,
    stop,
    wait_healthy,
)
from core.db import job_state
from core.db.models import Job, JobStatus
from core.db.session import make_engine
from core.db.types import utc_now


@dataclass
class Run:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


def _ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def wrk(url: str, connections: int, duration_s: int, threads: int) -> Run:
    out = subprocess.run(
        ["wrk", f"-t{min(threads, connections)}", f"-c{connections}", f"-d{duration_s}s",
         "--latency", "--timeout", "10s", url],
        capture_output=True, text=True, timeout=duration_s + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"\s50%\s+(\S+)", out)
    p99 = re.search(r"\s99%\s+(\S+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), "
                              r"timeout (\d+)", out)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = (sum(int(n) for n in socket_errors.groups()) if socket_errors else 0) + (
        int(non_2xx.group(1)) if non_2xx else 0)
    return Run(rps, _ms(p50.group(1)) if p50 else float("nan"),
               _ms(p99.group(1)) if p99 else float("nan"), errors)


class HeartbeatProbe:
    """Writes a running job's heartbeat every 100 ms, as a worker's supervisor does."""

    def __init__(self, database_url: str, job_id: uuid.UUID) -> None:
        self._engine = make_engine(database_url)
        self._job_id = job_id
        self.latencies_ms: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            started = time.perf_counter()
            try:
                with Session(self._engine) as session, session.begin():
                    job_state.heartbeat(session, self._job_id)
                self.latencies_ms.append((time.perf_counter() - started) * 1000)
            except Exception:
                self.failures += 1

    def __enter__(self) -> HeartbeatProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._engine.dispose()


def _running_job(database_url: str, model_of: uuid.UUID) -> uuid.UUID:
    engine = make_engine(database_url)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        template = session.get_one(Job, model_of)
        job = Job(project_id=template.project_id, model_id=template.model_id,
                  config=template.config,
                  status=JobStatus.RUNNING.value, heartbeat_at=utc_now(), started_at=utc_now())
        session.add(job)
    engine.dispose()
    return job.id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: SQLite)")
    parser.add_argument("--broker-url", help="a Redis database (default: SQLite broker)")
    parser.add_argument("--connections", default="16,64,256")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--read-cache-s", type=float,
                        help="the API's FUSEFORGE_HTTP__READ_CACHE_S (default: its default)")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")

    folder = Path(tempfile.mkdtemp(prefix="fuseforge-http-"))
    ff_port, bare_port = free_port(), free_port()
    read_cache_s = None if args.read_cache_s is None else str(args.read_cache_s)
    env = fuseforge_env(folder / "data", ff_port, FUSEFORGE_DATABASE_URL=args.database_url,
                        FUSEFORGE_BROKER_URL=args.broker_url,
                        FUSEFORGE_HTTP__READ_CACHE_S=read_cache_s)
    subprocess.run([*FUSEFORGE, "migrate"], env=env, check=True, capture_output=True)
    database_url = args.database_url or f"sqlite:///{(folder / 'data' / 'fuseforge.sqlite')}"
    job_ids = seed_jobs(database_url)
    running = _running_job(database_url, job_ids[0])
    ff = f"http://127.0.0.1:{ff_port}"
    bare = f"http://127.0.0.1:{bare_port}"
    servers = [
        start_fuseforge("serve", env, folder / "api.log"),
        start([sys.executable, "-m", "bench.service.bare_app", str(bare_port)], env,
              folder / "bare.log"),
    ]
    targets = {
        "bare async GET /v1/jobs/{id}": f"{bare}/v1/jobs/{job_ids[1]}",
        "bare sync GET /v1/jobs/{id}": f"{bare}/sync/v1/jobs/{job_ids[1]}",
        "GET /v1/jobs/{id}": f"{ff}/v1/jobs/{job_ids[1]}",
        "GET /v1/jobs/{id} (running)": f"{ff}/v1/jobs/{running}",
        "GET /v1/jobs?limit=50": f"{ff}/v1/jobs?limit=50",
        "GET /healthz": f"{ff}/healthz",
    }
    setup = "PostgreSQL + Redis" if args.database_url else "embedded (SQLite, SQLite broker)"
    cache = "" if args.read_cache_s is None else f", read cache {args.read_cache_s:g} s"
    print(f"{setup}{cache}; wrk {args.duration} s per run, {args.rounds} interleaved rounds, "
          f"median of rounds", flush=True)
    try:
        wait_healthy(f"{ff}/healthz", servers[0], timeout_s=120)
        wait_healthy(f"{bare}/v1/jobs/x", servers[1], timeout_s=120)
        for connections in (int(c) for c in args.connections.split(",")):
            runs: dict[str, list[Run]] = {name: [] for name in targets}
            with HeartbeatProbe(database_url, running) as probe:
                for _ in range(args.rounds):
                    for name, url in targets.items():
                        runs[name].append(wrk(url, connections, args.duration, args.threads))
            _print(connections, runs, probe)
    finally:
        for server in servers:
            stop(server, timeout_s=30)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


def _print(connections: int, runs: dict[str, list[Run]], probe: HeartbeatProbe) -> None:
    bare_rps = statistics.median(r.requests_per_s for r in next(iter(runs.values())))
    print(f"\n{connections} connections")
    print(f"  {'target':<28} {'req/s':>9} {'× bare':>7} {'p50 ms':>8} {'p99 ms':>9} {'errors':>7}")
    for name, results in runs.items():
        rps = statistics.median(r.requests_per_s for r in results)
        print(f"  {name:<28} {rps:>9.0f} {rps / bare_rps:>7.2f} "
              f"{statistics.median(r.p50_ms for r in results):>8.1f} "
              f"{statistics.median(r.p99_ms for r in results):>9.1f} "
              f"{sum(r.errors for r in results):>7}")
    if probe.latencies_ms:
        latencies = sorted(probe.latencies_ms)
        print(f"  worker heartbeat writes meanwhile: {len(latencies)} ok, {probe.failures} failed,"
              f" p50 {statistics.median(latencies):.1f} ms, "
              f"p99 {latencies[int(0.99 * (len(latencies) - 1))]:.1f} ms", flush=True)
    else:
        print(f"  worker heartbeat writes meanwhile: none succeeded, {probe.failures} failed",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
