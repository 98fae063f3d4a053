"""The playground's example prompts and its first-look fixes, in Debian's chromium (Playwright)."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.playground import Playground
from app.playground.demo import EXAMPLES, demo_model
from app.settings import Settings

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

try:
    from playwright.async_api import Page, async_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    async_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(async_playwright is None, reason="playwright is not installed"),
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (or set CHROMIUM=/path/to/it)"),
]

#: What each example shows once the demo answered it: a selector that appears in the page.
SHOWN = {
    "a step and a reaction": '.step.complete[data-step="Reading the thread"]',
    "a question": 'button.bk[data-action-id="threadbound_ask_option_0"]',
    "an approval": 'button.bk[data-action-id="threadbound_ask_approve"]',
    "a follow-up": ".follow-up",
    "a file": '.msg.bot .file:has-text("notes.txt")',
}


def settings(tmp_path: Path) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )


async def _open(pw: object, pg: Playground, width: int = 1200) -> tuple[object, Page]:
    browser = await pw.chromium.launch(  # type: ignore[attr-defined]
        executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
    )
    page = await browser.new_page(viewport={"width": width, "height": 900})
    await page.goto(pg.url)
    return browser, page


async def test_each_example_prompt_shows_its_feature(tmp_path: Path) -> None:
    """In chromium with the demo model: the empty channel offers one example per feature (every
    entry of EXAMPLES); clicking each (the first in the empty state, the rest from the composer's
    Examples menu) shows its step and reaction, question card, approval card, follow-up or file."""
    assert sorted(SHOWN) == sorted(shows for shows, _ in EXAMPLES)
    async with Playground(settings(tmp_path), model=demo_model()) as pg, async_playwright() as pw:
        browser, page = await _open(pw, pg)
        try:
            offered = page.locator("#messages button.example")
            await offered.first.wait_for(timeout=30_000)
            assert await offered.count() == len(EXAMPLES)
            for index, (shows, _) in enumerate(EXAMPLES):
                if index == 0:
                    await page.locator(f'#messages button.example[data-example="{shows}"]').click()
                else:
                    await page.locator("#examples-menu summary").click()
                    await page.locator(f'#examples-menu button.example[data-example="{shows}"]').click()
                await page.locator(SHOWN[shows]).first.wait_for(timeout=30_000)
                if shows == "a step and a reaction":
                    eyes = page.locator('.thread > .msg .reaction[data-reaction="eyes"]')
                    await eyes.wait_for(timeout=30_000)
            await page.screenshot(path=str(tmp_path / "examples.png"), full_page=True)
            # The demo quoted what it was sent as preformatted text, not as Markdown.
            assert await page.locator(".msg.bot .text pre").count() >= 1
        finally:
            await browser.close()  # type: ignore[attr-defined]


async def test_switching_person_keeps_the_thread_being_replied_in(tmp_path: Path) -> None:
    """Replying in a thread, switching "You are" to someone else keeps the "Replying in the thread"
    target, so the next message goes to the thread (where the task is), not to the channel."""
    async with Playground(settings(tmp_path), model=demo_model()) as pg, async_playwright() as pw:
        browser, page = await _open(pw, pg)
        try:
            await page.fill("#text", "@threadbound hello")
            await page.press("#text", "Enter")
            await page.locator(".reply-link").first.wait_for(timeout=30_000)
            await page.locator(".reply-link").first.click()
            assert await page.locator("#target").is_visible()
            await page.select_option("#person", "U0CAROL")
            assert await page.locator("#target").is_visible()
            await page.fill("#text", "a reply from Carol")
            await page.press("#text", "Enter")
            await page.locator(".replies .msg.person", has_text="a reply from Carol").wait_for(timeout=30_000)
            # A DM is its person's only: switching away from its person leaves its thread.
        finally:
            await browser.close()  # type: ignore[attr-defined]


async def test_emoji_shortcodes_steps_and_no_lingering_status(tmp_path: Path) -> None:
    """The question card's :grey_question: shows as ❔, the demo's tool steps show in its answer, and
    no "is thinking…" stays under the thread once the answer is there."""
    async with Playground(settings(tmp_path), model=demo_model()) as pg, async_playwright() as pw:
        browser, page = await _open(pw, pg)
        try:
            await page.locator('#messages button.example[data-example="a question"]').click()
            card = page.locator(".msg.bot .text", has_text="Which one should I pick?")
            await card.wait_for(timeout=30_000)
            assert "❔" in await card.inner_text() and ":grey_question:" not in await card.inner_text()
            await page.locator("#examples-menu summary").click()
            await page.locator('#examples-menu button.example[data-example="a step and a reaction"]').click()
            await page.locator(".msg.bot .text", has_text="read the thread").wait_for(timeout=30_000)
            assert pg.service is not None
            await pg.service.runner.idle()
            await page.wait_for_timeout(300)
            assert await page.locator(".status").count() == 0
            assert await page.locator(".step").count() >= 2
        finally:
            await browser.close()  # type: ignore[attr-defined]


async def test_after_fast_forward_stamps_follow_the_demo_clock_and_no_bar_lingers_at_420_px(
    tmp_path: Path,
) -> None:
    """At 420 px: a follow-up is scheduled, fast-forward fires it; the message it posts carries the
    demo clock's time (the clock and the stamp agree), and the fast-forward bar is gone, not left
    disabled, once nothing waits."""
    async with Playground(settings(tmp_path), model=demo_model()) as pg, async_playwright() as pw:
        browser, page = await _open(pw, pg, width=420)
        try:
            await page.locator('#messages button.example[data-example="a follow-up"]').click()
            await page.locator(".follow-up").wait_for(timeout=30_000)
            assert pg.service is not None
            await pg.service.runner.idle()  # the turn that scheduled it has answered
            assert await page.locator("#fast-forward").is_visible()
            await page.click("#fast-forward")
            fired = page.locator(".msg.bot .text", has_text="Follow-up you scheduled")
            await fired.wait_for(timeout=30_000)
            await page.locator("#fast-forward").wait_for(state="hidden", timeout=30_000)
            clock = await page.locator("#clock").inner_text()
            assert clock.startswith("demo clock: ") and "min ahead" in clock
            message = page.locator(".msg.bot", has=page.locator(".text", has_text="Follow-up you scheduled"))
            stamp = await message.locator("time.when").get_attribute("datetime")
            assert stamp is not None
            shown = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            demo_now = datetime.fromtimestamp(pg.board.clock.now(), UTC)
            assert abs((demo_now - shown).total_seconds()) < 120, (shown, demo_now)
            wide = await page.evaluate("document.documentElement.scrollWidth")
            assert wide <= 420
            await page.screenshot(path=str(tmp_path / "fast-forward-420.png"), full_page=True)
        finally:
            await browser.close()  # type: ignore[attr-defined]
