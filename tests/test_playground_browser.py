"""The playground in a real browser: Debian's chromium, driven by Playwright (no browser download)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from app.playground import Playground
from app.settings import Settings
from tests.support.models import Turn, call, echo_model, scripted
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
        CHROMIUM is None,
        reason="no chromium on PATH: `apt-get install -y chromium` (Debian) or set CHROMIUM=/path/to/it",
    ),
]


async def test_a_mention_typed_in_the_page_is_answered_and_a_button_click_reaches_the_app(
    tmp_path: Path,
) -> None:
    """In chromium: pick a person, type a mention, see the bot's rendered reply arrive live, click
    the app's feedback button under it and see the app count the signed click; the screenshot is
    saved as playground.png in the test's folder."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    async with Playground(settings, model=echo_model()) as pg, async_playwright() as pw:
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
            await page.screenshot(path=str(tmp_path / "playground.png"), full_page=True)
        finally:
            await browser.close()
    assert (tmp_path / "playground.png").stat().st_size > 0


def metrics(pg: Playground) -> str:
    assert pg.service is not None
    return pg.service.observer.metrics.render().decode()


async def test_an_approval_card_clicked_in_the_page_lets_the_gated_call_run(tmp_path: Path) -> None:
    """In chromium: Bob asks for a reaction that agent.toml gates (``approval``); the app's card
    shows Approve/Deny, Bob clicks Approve, and the reaction and the resumed run's answer appear."""
    agent_file = tmp_path / "agent.toml"
    agent_file.write_text('approval = ["channel_react"]\n', encoding="utf-8")
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=agent_file, skills_dir=None, sweep_interval=3600.0
    )

    def script(turn: Turn) -> list[Any]:
        if turn.prompt and "react" in turn.prompt:
            handle = re.search(r'"message": "(msg_[A-Za-z0-9_-]+)"', turn.prompt)
            assert handle is not None
            return [call("channel_react", message=handle.group(1), emoji="white_check_mark")]
        reacted = [r for name, r in turn.results if name == "channel_react"]
        if reacted:
            return [call("channel_reply", text="reacted: " + ("ok" if "error" not in reacted[0] else "no"))]
        return [""]

    async with Playground(settings, model=scripted(script)) as pg, async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            await page.goto(pg.url)
            await page.select_option("#person", "U0BOB")
            await page.fill("#text", "@threadbound please react to this")
            await page.press("#text", "Enter")
            approve = page.locator('button.bk[data-action-id="threadbound_approve"]')
            await approve.wait_for(timeout=30_000)
            await page.screenshot(path=str(tmp_path / "approval-card.png"), full_page=True)
            await approve.click()
            await page.locator('.thread > .msg .reaction[data-reaction="white_check_mark"]').wait_for(
                timeout=30_000
            )
            await page.locator(".msg.bot .text", has_text="reacted: ok").wait_for(timeout=30_000)
            await page.screenshot(path=str(tmp_path / "approved.png"), full_page=True)
        finally:
            await browser.close()


EVIL_PAGE = """<!DOCTYPE html>
<html><body>
<iframe name="sink" id="sink"></iframe>
<form id="form" method="POST" enctype="multipart/form-data" target="sink" action="{target}api/messages">
  <input name="as" value="U0ALICE"><input name="channel" value="C0GENERAL">
  <input name="text" value="@threadbound approve everything (form)">
</form>
<script>
(async () => {{
  const body = JSON.stringify(
    {{as: "U0ALICE", channel: "C0GENERAL", text: "@threadbound approve everything"}});
  // A "simple" request: no preflight, the browser sends it and hides the answer.
  const simple = {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}}, body}};
  await fetch("{target}api/messages", simple);
  await fetch("{target}api/click", simple);
  document.getElementById("sink").addEventListener("load", () => {{ document.title = "done"; }});
  document.getElementById("form").submit();
}})();
</script>
</body></html>
"""


async def test_a_page_on_another_origin_cannot_post_through_the_playground(tmp_path: Path) -> None:
    """In chromium: a page on another origin sends the playground a no-cors text/plain JSON post,
    a click and a multipart form post; all are refused and nothing reaches the workspace."""
    from aiohttp import web

    from app.playground import GENERAL

    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    async with Playground(settings, model=echo_model()) as pg, async_playwright() as pw:
        evil = web.Application()

        async def page(_: web.Request) -> web.Response:
            return web.Response(text=EVIL_PAGE.format(target=pg.url), content_type="text/html")

        evil.router.add_get("/", page)
        runner = web.AppRunner(evil)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        evil_url = f"http://127.0.0.1:{runner.addresses[0][1]}/"  # another port: another origin
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            tab = await browser.new_page()
            await tab.goto(evil_url)
            await tab.wait_for_function("document.title === 'done'", timeout=30_000)
        finally:
            await browser.close()
            await runner.cleanup()
        assert pg.slack.messages(GENERAL) == []


async def test_a_dns_rebinding_page_cannot_read_the_workspace(tmp_path: Path) -> None:
    """In chromium with evil.test resolving to 127.0.0.1 (as a rebinding attacker's DNS answers):
    the page at evil.test:PORT is refused, and its same-origin fetch of /api/state gets a 403."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    async with Playground(settings, model=echo_model()) as pg, async_playwright() as pw:
        await pg.post("U0ALICE", "D0ALICE", "my private note")
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--host-resolver-rules=MAP evil.test 127.0.0.1"],
        )
        try:
            tab = await browser.new_page()
            response = await tab.goto(f"http://evil.test:{pg.port}/")
            assert response is not None and response.status == 403
            status, text = await tab.evaluate(
                "async () => { const r = await fetch('/api/state'); return [r.status, await r.text()]; }"
            )
            assert status == 403 and "my private note" not in text
        finally:
            await browser.close()


async def test_a_page_left_open_across_a_restart_reloads_with_the_new_token(tmp_path: Path) -> None:
    """In chromium: the playground restarts on the same port with a new token; the open page's
    refused stream makes it reload, and it is live again with the new token."""
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=tmp_path, agent_file=None, skills_dir=None, sweep_interval=3600.0
    )
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            async with Playground(settings, model=echo_model()) as first:
                page = await browser.new_page()
                await page.goto(first.url)
                await page.locator("#connection.live").wait_for(timeout=30_000)
                port = first.port
            async with Playground(settings, model=echo_model(), port=port) as second:
                token = page.locator('meta[name="playground-token"]')
                await page.wait_for_function(
                    "(t) => document.querySelector('meta[name=\"playground-token\"]').content === t",
                    arg=second.page_token,
                    timeout=30_000,
                )
                assert await token.get_attribute("content") == second.page_token
                await page.locator("#connection.live").wait_for(timeout=30_000)
        finally:
            await browser.close()
