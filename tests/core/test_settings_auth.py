"""Settings for API keys: prod refuses auth off and an absent, placeholder or short secret,
naming the variable; dev and test may run without keys."""

import pytest
from pydantic import ValidationError

from core.settings import AuthSettings, Settings, WebhookSettings

GOOD_SECRET = "k" * 48
PROD = {"env": "prod", "database_url": "postgresql+psycopg://db/ff", "broker_url": "redis://r/0",
        "webhooks": WebhookSettings(secret="w" * 48)}


def test_prod_refuses_auth_off_naming_the_variable() -> None:
    with pytest.raises(ValidationError, match="FUSEFORGE_AUTH__ENABLED"):
        Settings(**PROD, auth=AuthSettings(enabled=False, secret=GOOD_SECRET))


@pytest.mark.parametrize("secret", [None, "", "changeme", "change-me", "short-secret"])
def test_prod_refuses_an_absent_placeholder_or_short_secret(secret: str | None) -> None:
    with pytest.raises(ValidationError, match="FUSEFORGE_AUTH__SECRET"):
        Settings(**PROD, auth=AuthSettings(secret=secret))


def test_prod_runs_with_keys_and_a_real_secret() -> None:
    assert Settings(**PROD, auth=AuthSettings(secret=GOOD_SECRET)).auth.enabled


@pytest.mark.parametrize("env", ["dev", "test"])
def test_dev_and_test_may_run_without_keys(env: str) -> None:
    assert not Settings(env=env, auth=AuthSettings(enabled=False)).auth.enabled  # type: ignore[arg-type]


def test_auth_is_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FUSEFORGE_AUTH__ENABLED", raising=False)
    assert Settings().auth.enabled


def test_the_secret_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSEFORGE_AUTH__SECRET", GOOD_SECRET)
    secret = Settings().auth.secret
    assert secret is not None and secret.get_secret_value() == GOOD_SECRET
    assert GOOD_SECRET not in repr(Settings())  # SecretStr: no log or traceback shows it
