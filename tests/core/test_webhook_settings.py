"""The webhook signing secret: generated once for `make run`, required in prod."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from core.settings import AuthSettings, Settings, WebhookSettings

PROD = {"env": "prod", "database_url": "postgresql+psycopg://db/fuseforge",
        "broker_url": "redis://redis:6379/0"}


def test_the_embedded_secret_is_generated_once_and_shared_through_the_data_dir(
        tmp_path: Path) -> None:
    first = Settings(env="dev", data_dir=tmp_path).resolved_webhook_secret
    again = Settings(env="dev", data_dir=tmp_path).resolved_webhook_secret
    assert len(first) == 64 and first == again
    assert (tmp_path / "webhook-secret").stat().st_mode & 0o077 == 0  # only the owner reads it
    assert Settings(env="dev", data_dir=tmp_path / "other").resolved_webhook_secret != first


def test_a_configured_secret_wins_over_the_embedded_one(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, webhooks=WebhookSettings(secret="k" * 40))
    assert settings.resolved_webhook_secret == "k" * 40
    assert not (tmp_path / "webhook-secret").exists()


@pytest.mark.parametrize("secret", [None, "change-me", "short-but-real"])
def test_prod_refuses_a_missing_placeholder_or_short_secret_naming_the_variable(
        secret: str | None) -> None:
    with pytest.raises(ValidationError, match="FUSEFORGE_WEBHOOKS__SECRET"):
        Settings(**PROD, webhooks=WebhookSettings(secret=secret))


def test_prod_accepts_a_long_random_secret() -> None:
    assert Settings(**PROD, webhooks=WebhookSettings(secret="ab" * 32),
                    auth=AuthSettings(secret="k" * 48)).env == "prod"


def test_retry_pauses_double_up_to_their_cap() -> None:
    webhooks = WebhookSettings(first_retry_s=1, max_retry_s=5)
    assert [webhooks.retry_after_s(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
