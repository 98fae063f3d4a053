"""Detecting a SQLite database on a platform's ephemeral disk."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.ops.paas import ephemeral_disk_warning, ephemeral_platform
from app.settings import Settings


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path / "data", **values)  # type: ignore[call-arg,arg-type]


def never_mounted(path: str) -> bool:
    return False


@pytest.mark.parametrize(
    ("environ", "platform"),
    [
        ({"DYNO": "web.1"}, "Heroku"),
        ({"RENDER": "true"}, "Render"),
        ({"FLY_APP_NAME": "bot"}, "Fly.io"),
        ({}, None),
        ({"DYNO": ""}, None),
    ],
)
def test_platforms(environ: dict[str, str], platform: str | None) -> None:
    """Heroku, Render and Fly.io are recognised by the variables they set."""
    assert ephemeral_platform(environ) == platform


def test_sqlite_on_heroku_warns(tmp_path: Path) -> None:
    """The default SQLite file on a Heroku dyno is warned about, even on a mount (Heroku has no volumes)."""
    warning = ephemeral_disk_warning(settings(tmp_path), {"DYNO": "web.1"}, is_mount=lambda p: True)
    assert warning is not None
    assert "DATA_DIR" in warning and "Heroku" in warning and "DATABASE_URL=postgresql://" in warning


def test_postgres_or_no_platform_is_quiet(tmp_path: Path) -> None:
    """Postgres, or no known platform, means nothing to warn about."""
    pg = settings(tmp_path, database_url="postgres://u@db.example.com/x")
    assert ephemeral_disk_warning(pg, {"DYNO": "web.1"}, never_mounted) is None
    assert ephemeral_disk_warning(settings(tmp_path), {}, never_mounted) is None


def test_volume_on_fly_or_render_is_quiet(tmp_path: Path) -> None:
    """A Fly volume or Render disk (a mount above the database) keeps the file, so no warning."""
    mount = str(tmp_path)
    for environ in ({"FLY_APP_NAME": "bot"}, {"RENDER": "true"}):
        assert ephemeral_disk_warning(settings(tmp_path), environ, lambda p: p == mount) is None
        assert ephemeral_disk_warning(settings(tmp_path), environ, never_mounted) is not None


async def test_service_logs_the_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Service.create logs the warning at start-up on an ephemeral platform (here it then fails on MODEL)."""
    from app.service import Service, StartupError

    monkeypatch.setenv("DYNO", "web.1")
    monkeypatch.chdir(tmp_path)
    config = settings(tmp_path, slack_bot_token="xoxb-x", slack_signing_secret="s", model="")
    with caplog.at_level(logging.WARNING, logger="app.service"), pytest.raises(StartupError, match="MODEL"):
        await Service.create(config)
    assert any("ephemeral disk" in r.getMessage() for r in caplog.records)
