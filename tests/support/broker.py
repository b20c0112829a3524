"""The Redis databases tests send jobs to: one per stack that runs beside the others, all
numbered here (two stacks sharing a database would take each other's jobs).

Importing it sets FUSEFORGE_BROKER_URL's default, the suite's own database (tests/conftest.py
imports it before any module reads settings), so a run can be given a Redis database (or
server) of its own by setting it in the environment; FUSEFORGE_TEST_REDIS moves every stack to
another server.
"""

import os

__all__ = ["REDIS_DATABASES", "TEST_REDIS_URL", "redis_url"]

_SERVER = os.environ.get("FUSEFORGE_TEST_REDIS", "redis://127.0.0.1:6379")

# Which stack uses which database number (0 is left to a developer's own service).
REDIS_DATABASES = {
    "browser": 11,  # tests/dashboard/browser_stack.py
    "e2e-tensorrt": 12,  # tests/e2e/test_tensorrt_worker.py
    "e2e-gpu-routing": 13,  # tests/e2e/test_gpu_routing.py
    "e2e-postgres-redis": 14,  # tests/e2e/test_postgres_redis_worker.py
    "suite": 15,  # the API fixtures and the embedded worker (tests/conftest.py)
}


# pytest-xdist workers run side by side, each with stacks of its own: worker gwN uses each
# database number above minus 5 * N (gw1: 6-10, gw2: 1-5), so at most three workers.
_WORKER_SHIFT, _MAX_WORKERS = 5, 3


def redis_url(stack: str) -> str:
    """The Redis URL of `stack`'s database (a key of REDIS_DATABASES) for this pytest-xdist
    worker (the first, or the only process, uses the numbers above)."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    if worker >= _MAX_WORKERS:
        raise RuntimeError(f"pytest-xdist worker gw{worker}: at most {_MAX_WORKERS} workers have "
                           "Redis databases of their own")
    return f"{_SERVER}/{REDIS_DATABASES[stack] - _WORKER_SHIFT * worker}"


# The suite's database: the caller's FUSEFORGE_BROKER_URL, else this worker's own. A pytest-xdist
# worker inherits the environment the controller's conftest wrote, which the marker tells from
# one the caller set.
_DEFAULTED = "_FUSEFORGE_BROKER_DEFAULTED"
if "FUSEFORGE_BROKER_URL" not in os.environ or os.environ.get(_DEFAULTED):
    os.environ["FUSEFORGE_BROKER_URL"] = redis_url("suite")
    os.environ[_DEFAULTED] = "1"
TEST_REDIS_URL = os.environ["FUSEFORGE_BROKER_URL"]
