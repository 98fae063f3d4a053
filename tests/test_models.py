"""MODEL takes any pydantic-ai model string; every mistake is one line naming the fix, from ``serve``
and from ``check`` alike: a bare name, an unknown provider, a provider SDK not installed, a missing key."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic_ai.models import Model

from app.__main__ import main
from app.agent.models import build_model, install_hint, suggest_prefix
from app.settings import Settings

GOOD = {
    "SLACK_BOT_TOKEN": "xoxb-1111-2222-models-test-token",
    "SLACK_SIGNING_SECRET": "test-signing-secret",
}
PROVIDER_KEYS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GROQ_API_KEY", "MISTRAL_API_KEY", "CO_API_KEY")


def settings(**values: str) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The developer's own provider keys never decide a test; main() leaves the root logger as it was."""
    for key in PROVIDER_KEYS:
        monkeypatch.delenv(key, raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str]]:
    """In-process ``main(args)`` in ``tmp_path`` with exactly the given settings: (exit, stdout, stderr)."""

    def run(*args: str, **values: str) -> tuple[int, str, str]:
        monkeypatch.chdir(tmp_path)
        for name in Settings.model_fields:
            monkeypatch.delenv(name.upper(), raising=False)
        for name, value in {"DATA_DIR": str(tmp_path / "data"), **values}.items():
            monkeypatch.setenv(name, value)
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        code = main(list(args))
        return code, out.getvalue(), err.getvalue()

    return run


def without_sdk(monkeypatch: pytest.MonkeyPatch, sdk: str, provider: str) -> None:
    """Make ``sdk`` impossible to import, as when its extra was never installed."""
    monkeypatch.setitem(sys.modules, sdk, None)
    parent, _, child = sdk.rpartition(".")
    if parent and parent in sys.modules:  # `from google import genai` finds the attribute first
        monkeypatch.delattr(sys.modules[parent], child, raising=False)
    for module in (f"pydantic_ai.providers.{provider}", f"pydantic_ai.models.{provider}"):
        monkeypatch.delitem(sys.modules, module, raising=False)


@pytest.mark.parametrize(
    ("bare", "suggested"),
    [
        ("gpt-4o", "openai-chat:gpt-4o"),
        ("claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"),
        ("gemini-2.5-flash", "google:gemini-2.5-flash"),
        ("mistral-large-latest", "mistral:mistral-large-latest"),
    ],
)
def test_a_bare_model_name_suggests_its_prefix(bare: str, suggested: str) -> None:
    """A model name without a provider is refused with the prefixed name to use instead."""
    assert suggest_prefix(bare) == suggested
    with pytest.raises(ValueError) as refused:
        build_model(bare, settings())
    expected = f"MODEL={bare} needs a provider prefix (provider:model): did you mean MODEL={suggested}?"
    assert str(refused.value) == expected


def test_an_unknown_provider_is_one_line() -> None:
    """A prefix pydantic-ai does not know is named, with the common ones to choose from."""
    with pytest.raises(ValueError, match=r"^MODEL=foo:bar names an unknown provider 'foo': .*google, groq"):
        build_model("foo:bar", settings())


def test_the_builtin_prefixes_keep_their_settings() -> None:
    """openai-chat:, openai: and anthropic: are still built from OPENAI_BASE_URL and the keys in Settings."""
    local = settings(openai_base_url="http://127.0.0.1:8000/v1")
    chat = build_model("openai-chat:qwen", local)
    assert (chat.system, chat.base_url) == ("openai", "http://127.0.0.1:8000/v1/")
    claude = build_model("anthropic:claude-sonnet-4-5", settings(anthropic_api_key="sk-ant-x"))
    assert claude.system == "anthropic"


def test_pydantic_ai_v1_google_names_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """google-gla: (pydantic-ai 1.x's name, in many guides) builds the Gemini API model of google:."""
    pytest.importorskip("google.genai")
    monkeypatch.setenv("GOOGLE_API_KEY", "google-test-key")
    model: Model = build_model("google-gla:gemini-2.5-flash", settings())
    assert (model.system, model.model_name) == ("google", "gemini-2.5-flash")


def test_a_missing_provider_key_is_named_with_where_to_get_it() -> None:
    """MODEL=groq:NAME without GROQ_API_KEY names the key and Groq's key page."""
    pytest.importorskip("groq")
    with pytest.raises(ValueError) as refused:
        build_model("groq:llama-3.3-70b-versatile", settings())
    assert str(refused.value) == (
        "MODEL=groq:llama-3.3-70b-versatile: GROQ_API_KEY is not set: https://console.groq.com/keys"
    )


@pytest.mark.parametrize(
    ("model", "sdk", "provider", "command"),
    [
        ("groq:llama-3.3-70b-versatile", "groq", "groq", "pip install 'threadbound[groq]'"),
        ("mistral:mistral-large-latest", "mistralai", "mistral", "pip install 'threadbound[mistral]'"),
        ("google:gemini-2.5-flash", "google.genai.client", "google", "pip install 'threadbound[google]'"),
        ("bedrock:amazon.nova-pro-v1:0", "boto3", "bedrock", "pip install 'threadbound[bedrock]'"),
    ],
)
def test_a_missing_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, model: str, sdk: str, provider: str, command: str
) -> None:
    """A provider whose SDK is not installed is refused with the pip command of its extra."""
    without_sdk(monkeypatch, sdk, provider)
    with pytest.raises(ValueError) as refused:
        build_model(model, settings())
    assert str(refused.value) == f"MODEL={model} needs the {provider} SDK, which is not installed: {command}"


def test_a_provider_without_an_extra_of_ours_names_pydantic_ais() -> None:
    """A provider we ship no extra for is installed through pydantic-ai-slim's own extra, at our pin."""
    assert install_hint("cohere") == "pip install 'pydantic-ai-slim[cohere]==2.68.0'"


def test_serve_refuses_a_missing_extra_in_one_line(
    cli: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve` with MODEL=groq:… and no groq SDK exits 2 with one `cannot start:` line naming the command."""
    without_sdk(monkeypatch, "groq", "groq")
    code, _, err = cli("serve", MODEL="groq:llama-3.3-70b-versatile", **GOOD)
    assert code == 2
    assert err.splitlines() == [
        "threadbound: cannot start: MODEL=groq:llama-3.3-70b-versatile needs the groq SDK, "
        "which is not installed: pip install 'threadbound[groq]'"
    ]


def test_serve_suggests_the_prefix_for_a_bare_name(cli: Callable[..., tuple[int, str, str]]) -> None:
    """`serve` with MODEL=gpt-4o exits 2 with one line suggesting openai-chat:gpt-4o."""
    code, _, err = cli("serve", MODEL="gpt-4o", OPENAI_API_KEY="sk-test-0123456789abcdef", **GOOD)
    assert code == 2
    assert err.splitlines() == [
        "threadbound: cannot start: MODEL=gpt-4o needs a provider prefix (provider:model): "
        "did you mean MODEL=openai-chat:gpt-4o?"
    ]


def test_check_reports_a_missing_key_as_one_fail_line(cli: Callable[..., tuple[int, str, str]]) -> None:
    """`check` reports MODEL=mistral:… without MISTRAL_API_KEY as one FAIL line naming the key."""
    pytest.importorskip("mistralai")
    code, out, _ = cli("check", "--no-model", MODEL="mistral:mistral-large-latest")
    assert code == 1
    assert (
        "FAIL  model           MODEL=mistral:mistral-large-latest: MISTRAL_API_KEY is not set: "
        "https://console.mistral.ai/api-keys"
    ) in out.splitlines()
