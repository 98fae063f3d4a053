"""Per-request model settings that make a conversation's requests cheap to repeat: prompt caching.

A task's requests repeat everything before the newest message byte for byte (instructions, tool
definitions, history), so the provider can serve that prefix from its cache:

- Anthropic caches only at explicit breakpoints: one after the instructions, one after the tool
  definitions and one on the newest message block (pydantic-ai's ``anthropic_cache_*`` settings;
  the per-message form also works on Anthropic-compatible gateways, unlike the top-level one).
- OpenAI caches prefixes by itself; a per-task ``prompt_cache_key`` routes one conversation's
  requests to the same cache. Sent only to OpenAI's own API (and Azure OpenAI): OpenAI-compatible
  servers behind ``OPENAI_BASE_URL`` may refuse a field they do not know.

Other models (the test and function models, Chat Completions servers of other vendors) get none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from pydantic_ai import RunContext
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings

if TYPE_CHECKING:
    from app.agent.deps import RunDeps

#: Hosts whose OpenAI API takes ``prompt_cache_key``.
_OPENAI_HOSTS = ("api.openai.com",)
_AZURE_SUFFIX = ".openai.azure.com"


def cache_key(task_id: str) -> str:
    """The ``prompt_cache_key`` of a task's requests: stable for the task, distinct between tasks."""
    return f"threadbound-{task_id}"


def prompt_cache_settings(model: Model, task_id: str) -> ModelSettings:
    """The cache settings for one request of ``task_id`` to ``model`` (see the module docstring)."""
    if model.system == "anthropic":
        # AnthropicModelSettings keys; that class lives in the module that imports the SDK.
        return cast(
            ModelSettings,
            {
                "anthropic_cache_instructions": True,
                "anthropic_cache_tool_definitions": True,
                "anthropic_cache_messages": True,
            },
        )
    if model.system == "openai" and _is_openai_api(model.base_url):
        return cast(ModelSettings, {"openai_prompt_cache_key": cache_key(task_id)})
    return ModelSettings()


def _is_openai_api(base_url: str | None) -> bool:
    host = (urlsplit(base_url).hostname or "") if base_url else ""
    return host in _OPENAI_HOSTS or host.endswith(_AZURE_SUFFIX)


def run_model_settings(ctx: RunContext[RunDeps]) -> ModelSettings:
    """The agent's ``model_settings`` callable: evaluated before every request of a run."""
    model = ctx.model
    if not isinstance(model, Model):  # a realtime model: no request settings of ours apply
        return ModelSettings()
    return prompt_cache_settings(model, ctx.deps.session.task.task_id)
