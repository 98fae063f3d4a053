"""The command line: configuration errors end with a clear message and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.__main__ import main


def test_invalid_settings_exit_2_with_the_variable_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A setting that fails validation names the variable and exits 2 without a traceback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLAIM_RETENTION_DAYS", "0")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "CLAIM_RETENTION_DAYS" in err and "Traceback" not in err


def test_missing_token_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` without SLACK_BOT_TOKEN says what to set and exits 2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    assert main(["serve"]) == 2
    assert "SLACK_BOT_TOKEN is not set" in capsys.readouterr().err
