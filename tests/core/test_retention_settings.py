"""Retention and quota settings: off by default, read from FUSEFORGE_RETENTION__* and
FUSEFORGE_QUOTA__*, and a limit that could not work is refused at start-up."""

import pytest
from pydantic import ValidationError

from core.settings import Settings


def test_nothing_expires_and_no_quota_applies_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FUSEFORGE_RETENTION__ARTIFACTS_DAYS", "FUSEFORGE_RETENTION__EVENTS_DAYS",
                 "FUSEFORGE_QUOTA__PROJECT_BYTES"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(env="test")
    assert settings.retention.artifacts_days is None and settings.retention.events_days is None
    assert settings.quota.project_bytes is None


def test_limits_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSEFORGE_RETENTION__ARTIFACTS_DAYS", "30")
    monkeypatch.setenv("FUSEFORGE_RETENTION__EVENTS_DAYS", "7.5")
    monkeypatch.setenv("FUSEFORGE_QUOTA__PROJECT_BYTES", "1073741824")
    monkeypatch.setenv("FUSEFORGE_JANITOR__SWEEP_INTERVAL_S", "600")
    settings = Settings(env="test")
    assert (settings.retention.artifacts_days, settings.retention.events_days) == (30, 7.5)
    assert settings.quota.project_bytes == 1024**3
    assert settings.janitor.sweep_interval_s == 600


@pytest.mark.parametrize(("name", "value"), [("FUSEFORGE_RETENTION__ARTIFACTS_DAYS", "0"),
                                             ("FUSEFORGE_QUOTA__PROJECT_BYTES", "-1")])
def test_a_limit_of_zero_or_less_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch,
                                                      name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=name.removeprefix("FUSEFORGE_").split("__")[1].lower()):
        Settings(env="test")
