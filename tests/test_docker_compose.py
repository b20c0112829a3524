"""Claims about docker-compose.yml and the Dockerfile it builds, checked without a Docker engine.

The schema check uses the Compose Specification's JSON Schema from ../shared/schemas (next to the
repository on the build machines); a user's clone has none, so that one test skips there.
"""

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator

REPO_ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
COMPOSE_SCHEMA = REPO_ROOT.parent / "shared" / "schemas" / "compose-spec.json"

APP_SERVICES = ("api", "worker-cpu", "worker-gpu")
# ${VAR:?message}: compose refuses to start when VAR is unset or empty, so no default is committed.
REQUIRED_VAR = r"\$\{[A-Z_][A-Z0-9_]*:\?[^}]+\}"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    # safe_load resolves the `<<: *anchor` merge keys, so services below carry the merged values.
    return yaml.safe_load(COMPOSE_FILE.read_text())


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whether written as a mapping or a KEY=VALUE list."""
    env = service.get("environment", {})
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def test_compose_file_matches_compose_spec_schema(compose):
    if not COMPOSE_SCHEMA.is_file():
        pytest.skip(
            f"../shared/schemas is absent ({COMPOSE_SCHEMA} not found); a user's clone has none"
        )
    validator = Draft7Validator(json.loads(COMPOSE_SCHEMA.read_text()))
    errors = [
        f"{'/'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(compose), key=lambda e: list(map(str, e.path)))
    ]
    assert not errors, "docker-compose.yml breaks the Compose Specification:\n" + "\n".join(errors)


@pytest.mark.parametrize("name", ["postgres", "redis", "api"])
def test_services_the_app_depends_on_have_healthchecks(compose, name):
    healthcheck = compose["services"][name].get("healthcheck", {})
    assert healthcheck.get("test"), f"service {name!r} has no healthcheck test"
    assert not healthcheck.get("disable"), f"service {name!r} disables its healthcheck"


def test_services_waited_on_as_healthy_define_a_healthcheck(compose):
    services = compose["services"]
    for name, service in services.items():
        for dependency, spec in (service.get("depends_on") or {}).items():
            if isinstance(spec, dict) and spec.get("condition") == "service_healthy":
                healthcheck = services[dependency].get("healthcheck", {})
                assert healthcheck.get("test") and not healthcheck.get("disable"), (
                    f"{name!r} waits for {dependency!r} to be healthy, "
                    f"but {dependency!r} has no enabled healthcheck"
                )


def test_app_services_wait_for_migrations(compose):
    for name in APP_SERVICES:
        depends_on = compose["services"][name]["depends_on"]
        assert depends_on["migrate"]["condition"] == "service_completed_successfully", name
        assert depends_on["postgres"]["condition"] == "service_healthy", name
        assert depends_on["redis"]["condition"] == "service_healthy", name


def test_gpu_worker_reserves_an_nvidia_gpu(compose):
    devices = compose["services"]["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        device.get("driver") == "nvidia" and "gpu" in device.get("capabilities", [])
        for device in devices
    ), f"worker-gpu reserves no nvidia device with the gpu capability: {devices}"


def test_gpu_worker_starts_only_with_the_gpu_profile(compose):
    services = compose["services"]
    assert services["worker-gpu"].get("profiles") == ["gpu"]
    # Everything else starts on a plain `docker compose up`, including on machines without a GPU.
    assert [name for name, s in services.items() if s.get("profiles")] == ["worker-gpu"]


def test_api_and_workers_share_no_disk_and_keep_artifacts_in_the_object_store(compose):
    services = compose["services"]
    for name in (*APP_SERVICES, "janitor", "migrate"):
        service = services[name]
        assert not service.get("volumes"), f"{name} mounts {service['volumes']}: no shared disk"
        env = environment(service)
        assert env["FUSEFORGE_STORAGE__BACKEND"] == "s3", name
        assert env["FUSEFORGE_STORAGE__S3__ENDPOINT_URL"] == "http://objectstore:8333", name
        assert env["FUSEFORGE_STORAGE__S3__BUCKET"], name
        for key in ("FUSEFORGE_STORAGE__S3__ACCESS_KEY_ID",
                    "FUSEFORGE_STORAGE__S3__SECRET_ACCESS_KEY"):
            assert re.fullmatch(REQUIRED_VAR, env[key]), f"{name}: {key}={env[key]!r}"
        assert services["objectstore"]["healthcheck"], name
    assert "artifacts" not in compose["volumes"]
    # The store's own identity is the one the services sign with.
    store_env = environment(services["objectstore"])
    api_env = environment(services["api"])
    assert store_env["AWS_ACCESS_KEY_ID"] == api_env["FUSEFORGE_STORAGE__S3__ACCESS_KEY_ID"]
    assert (store_env["AWS_SECRET_ACCESS_KEY"]
            == api_env["FUSEFORGE_STORAGE__S3__SECRET_ACCESS_KEY"])


def test_app_services_start_once_the_object_store_is_healthy(compose):
    for name in (*APP_SERVICES, "janitor", "migrate"):
        depends = compose["services"][name]["depends_on"]
        assert depends["objectstore"] == {"condition": "service_healthy"}, name


def test_api_and_workers_point_at_compose_postgres_and_redis(compose):
    for name in ("migrate", *APP_SERVICES):
        env = environment(compose["services"][name])
        assert env["FUSEFORGE_ENV"] == "prod", name
        assert re.fullmatch(
            rf"postgresql\+psycopg://fuseforge:{REQUIRED_VAR}@postgres:5432/fuseforge",
            env["FUSEFORGE_DATABASE_URL"],
        ), f"{name}: FUSEFORGE_DATABASE_URL={env['FUSEFORGE_DATABASE_URL']!r}"
        assert env["FUSEFORGE_BROKER_URL"] == "redis://redis:6379/0", name


def test_no_plaintext_password_is_committed(compose):
    for name, service in compose["services"].items():
        for key, value in environment(service).items():
            if "PASSWORD" in key or "SECRET_ACCESS_KEY" in key:
                assert re.fullmatch(REQUIRED_VAR, value), (
                    f"{name}: {key} is committed as {value!r}; use ${{{key}:?set {key}}}"
                )
            for password in re.findall(r"://[^:/@]+:([^@]*)@", value):
                assert re.fullmatch(REQUIRED_VAR, password), (
                    f"{name}: {key} embeds password {password!r}; "
                    "use ${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
                )


def test_every_build_target_is_a_dockerfile_stage(compose):
    stages = set(
        re.findall(
            r"^\s*FROM\s+(?:--\S+\s+)*\S+\s+AS\s+([\w.-]+)\s*$",
            DOCKERFILE.read_text(),
            flags=re.IGNORECASE | re.MULTILINE,
        )
    )
    targets = {
        name: service["build"]["target"]
        for name, service in compose["services"].items()
        if isinstance(service.get("build"), dict) and "target" in service["build"]
    }
    assert targets, "no service builds a Dockerfile target"
    missing = {name: target for name, target in targets.items() if target not in stages}
    assert not missing, f"targets without a `FROM ... AS` stage {sorted(stages)}: {missing}"
