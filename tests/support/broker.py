"""The Redis database tests send jobs to.

tests/conftest.py sets FUSEFORGE_BROKER_URL's default before any module reads settings, so a
run can be given a Redis database (or server) of its own by setting it in the environment.
"""

import os

__all__ = ["TEST_REDIS_URL"]

TEST_REDIS_URL = os.environ.get("FUSEFORGE_BROKER_URL", "redis://127.0.0.1:6379/15")
