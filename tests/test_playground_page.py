"""The playground page as a newcomer sees it, in Debian's chromium: a narrow window, the DM composer,
the chosen feedback button, real message times and the favicon."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.playground import Playground, demo_model
from app.settings import Settings
from tests.support.waiting import eventually

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

try:
    from playwright.async_api import async_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    async_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        async_playwright is None, reason="playwright is not installed (pip install -e '.[test]')"
    ),
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium on PATH: `apt-get install -y chromium` (Debian)"
    ),
]


def settings(tmp_path: Path) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )


async def test_the_page_at_420_px_with_the_demo_model(tmp_path: Path) -> None:
    """At 420 px nothing overflows sideways; the demo model's reaction and answer show; the chosen 👍
    looks pressed (aria-pressed, solid colour, not greyed); the time is the real time of posting; the
    DM composer asks for no mention; the favicon is served. Screenshot: narrow.png in the test's folder."""
    async with Playground(settings(tmp_path), model=demo_model()) as pg, async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 420, "height": 820})
            await page.goto(pg.url)
            await page.click("#mention")
            await page.type("#text", "hello from a phone")
            await page.press("#text", "Enter")
            answer = page.locator(".msg.bot .text", has_text="This is what the agent was sent")
            await answer.wait_for(timeout=30_000)
            await page.locator('.reaction[data-reaction="eyes"]').wait_for(timeout=30_000)
            wide = await page.evaluate("document.documentElement.scrollWidth")
            assert wide <= 420, f"the page is {wide} px wide at a 420 px window"
            thumbs = page.locator('button.bk[data-action-id="threadbound_feedback"]').first
            await thumbs.click()
            await eventually(lambda: 'threadbound_feedback_total{kind="positive"} 1.0' in metrics(pg))
            assert await thumbs.get_attribute("aria-pressed") == "true"
            look = await thumbs.evaluate(
                "b => { const s = getComputedStyle(b); return [s.opacity, s.color, s.backgroundColor]; }"
            )
            assert look == ["1", "rgb(255, 255, 255)", "rgb(18, 100, 163)"]
            shown = await page.locator(".msg.person time.when").first.get_attribute("datetime")
            assert shown is not None and shown[:4] >= "2026"
            await page.screenshot(path=str(tmp_path / "narrow.png"), full_page=True)
            await page.locator("#conversations a", has_text="✉").click()
            assert await page.locator("#mention").is_hidden()
            placeholder = await page.locator("#text").get_attribute("placeholder")
            assert placeholder is not None and "mention" not in placeholder
            icon = await page.request.get(pg.url.split("?")[0].rstrip("/") + "/static/favicon.svg")
            assert icon.ok and icon.headers["content-type"].startswith("image/svg+xml")
        finally:
            await browser.close()


def metrics(pg: Playground) -> str:
    assert pg.service is not None
    return pg.service.observer.metrics.render().decode()
