"""The playground in a real browser: Debian's chromium, driven by Playwright (no browser download)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from app.interactions import Action
from app.playground import GENERAL, Playground
from app.settings import Settings
from testing.models import echo_model
from testing.waiting import eventually

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

try:
    from playwright.async_api import async_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    async_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.skipif(
        async_playwright is None, reason="playwright is not installed (pip install -e '.[test]')"
    ),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium on PATH: `apt-get install -y chromium` (Debian) or set CHROMIUM=/path/to/it",
    ),
]


async def test_a_mention_typed_in_the_page_is_answered_and_a_button_click_reaches_the_app(
    tmp_path: Path,
) -> None:
    """In chromium: pick a person, type a mention, see the bot's rendered reply arrive live, click
    the app's feedback button and an approval button on the bot's messages and see the app receive
    each signed click; the screenshot is saved as playground.png in the test's folder."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    clicked: asyncio.Queue[Action] = asyncio.Queue()
    async with Playground(settings, model=echo_model()) as pg, async_playwright() as pw:
        assert pg.service is not None
        pg.service.interactions.on("threadbound_approve", clicked.put)
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            await page.goto(pg.url)
            await page.select_option("#person", "U0BOB")
            await page.click("#mention")
            await page.type("#text", "what is **new**?")
            await page.press("#text", "Enter")
            reply = page.locator(".msg.bot .text", has_text="echo:")
            await reply.wait_for(timeout=30_000)
            assert await reply.locator("strong").inner_text() == "new"  # Markdown rendered, not shown raw
            root_ts = await page.locator(".thread").first.get_attribute("data-thread")
            assert root_ts is not None
            # The app's own feedback buttons under its answer: 👍 is stored and counted by the app.
            await page.locator('button.bk[data-action-id="threadbound_feedback"]').first.click()
            await eventually(lambda: 'threadbound_feedback_total{kind="positive"} 1.0' in metrics(pg))
            # The approval request as the approvals feature posts it: a Block Kit actions block.
            await _ask_approval(pg, root_ts)
            button = page.locator('button.bk[data-action-id="threadbound_approve"]')
            await button.wait_for(timeout=30_000)
            await button.click()
            async with asyncio.timeout(30):
                action = await clicked.get()
            assert (action.user_id, action.channel, action.thread_ts, action.value) == (
                "U0BOB",
                GENERAL,
                root_ts,
                "approval-1",
            )
            await page.screenshot(path=str(tmp_path / "playground.png"), full_page=True)
        finally:
            await browser.close()
    assert (tmp_path / "playground.png").stat().st_size > 0


def metrics(pg: Playground) -> str:
    assert pg.service is not None
    return pg.service.observer.metrics.render().decode()


async def _ask_approval(pg: Playground, thread_ts: str) -> None:
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": "May I run `deploy`?"}},
        {
            "type": "actions",
            "block_id": "approval",
            "elements": [
                {
                    "type": "button",
                    "action_id": "threadbound_approve",
                    "value": "approval-1",
                    "style": "primary",
                    "text": {"type": "plain_text", "text": "Approve"},
                },
                {
                    "type": "button",
                    "action_id": "threadbound_deny",
                    "value": "approval-1",
                    "style": "danger",
                    "text": {"type": "plain_text", "text": "Deny"},
                },
            ],
        },
    ]
    client = pg.slack.web_client()
    await client.chat_postMessage(
        channel=GENERAL, thread_ts=thread_ts, text="May I run deploy?", blocks=blocks
    )
