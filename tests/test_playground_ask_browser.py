"""The agent's own question card in a real browser (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.playground import Playground, demo_model
from app.settings import Settings

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

try:
    from playwright.async_api import async_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    async_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(async_playwright is None, reason="playwright is not installed"),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (or set CHROMIUM=/path/to/it)"),
]


async def test_a_question_card_is_shown_and_answered_in_the_page(tmp_path: Path) -> None:
    """In chromium: Bob tells the demo model "ask me"; its question card shows one button per option;
    Bob clicks "That one", the card loses its buttons and says who answered, and the demo's next
    answer quotes "Bob answered q_…: That one"."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    async with Playground(settings, model=demo_model()) as pg, async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            await page.goto(pg.url)
            await page.select_option("#person", "U0BOB")
            await page.fill("#text", "@threadbound ask me something")
            await page.press("#text", "Enter")
            option = page.locator('button.bk[data-action-id="threadbound_ask_option_1"]')
            await option.wait_for(timeout=30_000)
            assert await option.inner_text() == "That one"
            await page.screenshot(path=str(tmp_path / "question-card.png"), full_page=True)
            await option.click()
            await page.locator(".msg.bot .text", has_text="Bob answered q_").wait_for(timeout=30_000)
            await option.wait_for(state="detached", timeout=30_000)
            await page.screenshot(path=str(tmp_path / "answered.png"), full_page=True)
        finally:
            await browser.close()
