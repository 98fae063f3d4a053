"""The playground's other ways in, over its page API: the message shortcut, the slash command and the
App Home tab, each reaching the real app as Slack would deliver it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.playground import GENERAL, Playground
from app.playground.guard import TOKEN_HEADER
from app.settings import Settings
from tests.support.models import echo_model
from tests.support.waiting import eventually


def _settings(tmp_path: Path) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "agent_file": None,
        "skills_dir": None,
        "sweep_interval": 3600.0,
        "shutdown_grace": 5.0,
        "stream": "off",
    }
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url, json=body) as response:
        answer = await response.json()
        assert response.status == 200, answer
        return dict(answer)


async def test_the_page_offers_the_shortcut_the_command_and_the_home_tab(tmp_path: Path) -> None:
    """Ask threadbound on Bob's message starts a task in its thread; `/threadbound usage` typed as
    Alice comes back as a note only Alice sees; opening the Home tab shows Alice's own, and a
    button that is not on it is refused."""
    async with (
        Playground(_settings(tmp_path), model=echo_model()) as pg,
        aiohttp.ClientSession(headers={TOKEN_HEADER: pg.page_token}) as http,
    ):
        assert pg.service is not None
        ts = pg.slack.add_message(GENERAL, "why is the build red?", "U0BOB")
        answer = await _post(http, f"{pg.url}api/shortcut", {"as": "U0ALICE", "channel": GENERAL, "ts": ts})
        assert answer["status"] == 200
        await pg.service.runner.idle()
        [reply] = [m for m in pg.slack.bot_messages(GENERAL) if m.get("thread_ts") == ts]
        assert "Alice asks about Bob" in reply["text"] and "why is the build red?" in reply["text"]

        await _post(http, f"{pg.url}api/command", {"as": "U0ALICE", "channel": GENERAL, "text": " usage"})
        state = pg.snapshot()
        notes = next(c for c in state["conversations"] if c["id"] == GENERAL)["ephemerals"]
        assert [n["user"] for n in notes] == ["U0ALICE"] and "tokens today" in notes[0]["html"]

        await _post(http, f"{pg.url}api/home", {"as": "U0ALICE"})
        assert pg.service.home is not None
        await pg.service.home.idle()
        await eventually(lambda: bool(pg.snapshot()["home"]["U0ALICE"]))
        home = pg.snapshot()["home"]
        assert any(i.get("text") == "Your follow-ups" for i in home["U0ALICE"]) and home["U0BOB"] == []
        async with http.post(
            f"{pg.url}api/home-click", json={"as": "U0ALICE", "action_id": "threadbound_x", "value": "1"}
        ) as refused:
            assert refused.status == 400


CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (or set CHROMIUM=/path/to/it)")
async def test_in_the_browser_the_shortcut_the_command_and_home_work(tmp_path: Path) -> None:
    """In chromium, as Alice: "Ask threadbound" beside Bob's message gets an answer in its thread;
    `/threadbound usage` typed in the composer comes back as a note only Alice sees; 🏠 Home shows
    her Home tab (screenshots in the test's folder)."""
    from playwright.async_api import async_playwright

    async with Playground(_settings(tmp_path), model=echo_model()) as pg, async_playwright() as pw:
        await pg.post("U0BOB", GENERAL, "why is the build red?")
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            await page.goto(pg.url)
            await page.select_option("#person", "U0ALICE")
            await page.locator("button.shortcut").first.click()
            await page.locator(".msg.bot .text", has_text="asks about").wait_for(timeout=30_000)
            await page.fill("#text", "/threadbound usage")
            await page.press("#text", "Enter")
            await page.locator(".msg.ephemeral .text", has_text="tokens today").wait_for(timeout=30_000)
            await page.screenshot(path=str(tmp_path / "ways-in.png"), full_page=True)
            await page.click('a[data-conversation="home"]')
            await page.locator("#messages h3", has_text="Your follow-ups").wait_for(timeout=30_000)
            await page.screenshot(path=str(tmp_path / "home.png"), full_page=True)
        finally:
            await browser.close()
