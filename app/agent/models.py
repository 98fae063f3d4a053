"""``MODEL`` to a pydantic-ai model: any provider ``pydantic_ai.models.infer_model`` knows.

``openai-chat:``, ``openai:`` and ``anthropic:`` are built here from our own settings
(``OPENAI_BASE_URL`` points Chat Completions at vLLM, Ollama or any compatible server); every other
prefix (``google:``, ``groq:``, ``mistral:``, ``bedrock:``, ``cohere:``, ...) goes to pydantic-ai, whose
providers read their keys from the environment (``GOOGLE_API_KEY``, ``GROQ_API_KEY``, AWS's chain).

Every mistake a newcomer makes here is one ``ValueError`` line naming the fix: a name without a
provider (``gpt-4o`` → ``openai-chat:gpt-4o``), an unknown provider, a provider SDK that is not
installed (``pip install 'threadbound[groq]'``), a missing key.
"""

from __future__ import annotations

import re

from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model

from app.settings import WHERE_TO_GET, Settings, model_key_missing

#: Provider prefixes whose SDK comes with one of our extras (``pip install 'threadbound[EXTRA]'``).
EXTRAS = {
    "google": "google",
    "google-cloud": "google",
    "groq": "groq",
    "mistral": "mistral",
    "bedrock": "bedrock",
}

#: Names pydantic-ai 1.x and many guides use, renamed in 2.x: accepted and mapped.
ALIASES = {"google-gla": "google", "google-vertex": "google-cloud"}

#: A bare model name's likely provider, by how the name starts (for the suggestion only).
_FAMILIES = (
    (("gpt-", "o1", "o3", "o4", "chatgpt-"), "openai-chat"),
    (("claude-",), "anthropic"),
    (("gemini-", "gemma-"), "google"),
    (("mistral-", "magistral-", "codestral-", "ministral-", "pixtral-", "devstral-"), "mistral"),
    (("llama-", "llama3", "qwen", "deepseek-r1-distill", "moonshotai/", "openai/gpt-oss"), "groq"),
    (("command-",), "cohere"),
)

#: Where to get the keys pydantic-ai's providers ask for, when they name one.
_KEY_HELP = {
    "GOOGLE_API_KEY": "https://aistudio.google.com/apikey",
    "GROQ_API_KEY": "https://console.groq.com/keys",
    "MISTRAL_API_KEY": "https://console.mistral.ai/api-keys",
    "CO_API_KEY": "https://dashboard.cohere.com/api-keys",
}


def suggest_prefix(name: str) -> str | None:
    """``provider:name`` for a bare model name whose family is recognisable, else None."""
    lowered = name.lower()
    for starts, provider in _FAMILIES:
        if lowered.startswith(starts):
            return f"{provider}:{name}"
    return None


def install_hint(provider: str) -> str:
    """The command that installs ``provider``'s SDK."""
    extra = EXTRAS.get(provider)
    if extra is not None:
        return f"pip install 'threadbound[{extra}]'"
    return f"pip install 'pydantic-ai-slim[{provider}]==2.68.0'"


def build_model(name: str, settings: Settings) -> Model:
    """A pydantic-ai model for ``MODEL`` (see the module docstring).

    Raises ValueError with one line naming the fix for a malformed name, an unknown provider, a
    provider SDK that is not installed or a missing key."""
    provider, _, model_name = name.strip().partition(":")
    if not model_name:
        guess = suggest_prefix(name.strip())
        hint = f"did you mean MODEL={guess}?" if guess else "e.g. openai-chat:gpt-4o-mini or anthropic:NAME"
        raise ValueError(f"MODEL={name} needs a provider prefix (provider:model): {hint}")
    provider = ALIASES.get(provider, provider)
    key = model_key_missing(f"{provider}:{model_name}", settings)
    if key is not None:
        raise ValueError(f"{key} is not set, and MODEL={name} needs it: {WHERE_TO_GET[key]}")
    try:
        if provider in ("openai-chat", "openai", "anthropic"):
            return _own_model(provider, model_name, settings)
        return _inferred_model(provider, model_name)
    except ImportError as exc:
        raise ValueError(
            f"MODEL={name} needs the {provider} SDK, which is not installed: {install_hint(provider)}"
        ) from exc
    except UserError as exc:  # pydantic-ai's word for a configuration mistake; say it in one line
        raise ValueError(f"MODEL={name}: {_configuration_problem(provider, str(exc))}") from exc


def _own_model(provider: str, model_name: str, settings: Settings) -> Model:
    if provider in ("openai-chat", "openai"):
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        oai = OpenAIProvider(
            base_url=settings.openai_base_url or None,
            # Local OpenAI-compatible servers (vLLM, Ollama) often need no key, but the SDK wants one.
            api_key=settings.openai_api_key.get_secret_value() or "not-needed",
        )
        if provider == "openai-chat":
            return OpenAIChatModel(model_name, provider=oai)
        return OpenAIResponsesModel(model_name, provider=oai)
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    return AnthropicModel(
        model_name,
        provider=AnthropicProvider(api_key=settings.anthropic_api_key.get_secret_value() or None),
    )


def _inferred_model(provider: str, model_name: str) -> Model:
    from pydantic_ai.models import infer_model
    from pydantic_ai.providers import infer_provider_class

    try:
        infer_provider_class(provider)
    except ValueError:
        raise ValueError(
            f"MODEL={provider}:{model_name} names an unknown provider {provider!r}: use a prefix "
            "pydantic-ai knows, e.g. openai-chat, anthropic, google, groq, mistral, bedrock "
            "(docs/models.md lists them)"
        ) from None
    except ImportError:
        raise  # the provider's SDK is missing: the caller names the extra
    return infer_model(f"{provider}:{model_name}")


_ENV_NAMED = re.compile(r"`([A-Z][A-Z0-9_]+)` environment variable")


def _configuration_problem(provider: str, message: str) -> str:
    """pydantic-ai's UserError for ``provider``, said as the setting to fix."""
    named = _ENV_NAMED.search(message)
    if named:
        key = named.group(1)
        where = _KEY_HELP.get(key)
        return f"{key} is not set" + (f": {where}" if where else "")
    if provider == "bedrock" and "region_name" in message:
        return "AWS_DEFAULT_REGION (or AWS_REGION) is not set; Bedrock also needs AWS credentials"
    return message.splitlines()[0] if message else "invalid model configuration"


def credential_hint(name: str) -> str:
    """The settings to check when ``name``'s provider refuses or cannot be reached (for ``check``)."""
    provider = ALIASES.get(name.partition(":")[0], name.partition(":")[0])
    if provider == "anthropic":
        return "ANTHROPIC_API_KEY"
    if provider in ("openai", "openai-chat"):
        return "OPENAI_API_KEY"
    if provider in ("google", "google-cloud"):
        return "GOOGLE_API_KEY (or your Google Cloud credentials)"
    if provider == "bedrock":
        return "the AWS credentials and region"
    return f"{provider.upper().replace('-', '_')}_API_KEY"


__all__ = ["ALIASES", "EXTRAS", "build_model", "credential_hint", "install_hint", "suggest_prefix"]
