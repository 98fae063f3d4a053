"""The adapter's look-up caches are bounded (least recently used out) and refreshed after a time to live."""

from __future__ import annotations

from pathlib import Path

from channel.slack.cache import LOOKUP_TTL, TtlCache
from tests.support.sessions import slack_session
from threadbound_emulator import FakeSlack


def test_a_full_cache_drops_the_least_recently_used_entry() -> None:
    """At most ``maxsize`` entries: a new one pushes out the entry used longest ago."""
    cache: TtlCache[str, int] = TtlCache(2, ttl=60, clock=lambda: 0.0)
    cache["a"] = 1
    cache["b"] = 2
    assert cache.get("a") == 1  # "a" used: "b" is now the oldest
    cache["c"] = 3
    assert len(cache) == 2 and "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3


def test_an_entry_is_forgotten_after_its_time_to_live() -> None:
    """An entry older than ``ttl`` reads as absent (and leaves the cache)."""
    now = [0.0]
    cache: TtlCache[str, int] = TtlCache(10, ttl=60, clock=lambda: now[0])
    cache["a"] = 1
    now[0] = 59.0
    assert cache.get("a") == 1
    now[0] = 60.0
    assert "a" not in cache and cache.get("a") is None and list(cache) == [] and len(cache) == 0


async def test_a_renamed_person_shows_their_new_name_after_the_time_to_live(tmp_path: Path) -> None:
    """Names are cached (one users.info), and looked up again once the cache's time to live has passed."""
    async with FakeSlack() as slack:
        slack.add_channel("C1", "general")
        slack.add_user("U1", "alice", display_name="Alice")
        root = slack.add_message("C1", "hi", user="U1")
        async with slack_session(slack, tmp_path, channel="C1", thread_ts=root) as env:
            now = [0.0]
            env.adapter.lookups._user_names.clock = lambda: now[0]
            assert (await env.adapter.user("U1"))[0] == "Alice"
            slack.add_user("U1", "alice", display_name="Alicia")
            assert (await env.adapter.user("U1"))[0] == "Alice"
            assert slack.count("users.info") == 1
            now[0] = LOOKUP_TTL + 1
            assert (await env.adapter.user("U1"))[0] == "Alicia"
            assert slack.count("users.info") == 2
