"""A packed LoRA adapter's ``adapter_config.json``, read from the Hub and checked before its staging job starts.

The check is preflight/adapters.py's (PEFT LoRA only, the deployment's base model, a rank within the engine's
``max_lora_rank``, target modules present): a failure fails the ``Custom::StagedCheckpoint`` before any job, so
the adapter inference component, created after its wait condition, is never created with an unservable adapter.
"""

from __future__ import annotations

from typing import Any

from staging_base import Settings, StagingError

from hfstage.hub import HubClient, HubError
from preflight.adapters import adapter_config_problems

CONFIG_NAME = "adapter_config.json"
CONFIG_LIMIT = 1024 * 1024  # bytes read at most: PEFT writes a few hundred


def check_adapter(settings: Settings, hub: HubClient, sha: str, files: tuple) -> None:
    """StagingError naming what makes the adapter unservable on its base; nothing when there is no check."""
    if not settings.max_lora_rank:
        return
    if not any(f.path == CONFIG_NAME for f in files):
        raise StagingError(
            f"adapter {settings.repo_id}@{sha}: no {CONFIG_NAME} among the files to pack (include "
            f"{list(settings.include) or ['*']}); a LoRA adapter needs it"
        )
    try:
        response = hub.open_file(settings.repo_id, sha, CONFIG_NAME)
        try:
            raw: Any = response.read(CONFIG_LIMIT + 1)
        finally:
            response.close()
    except HubError as e:
        raise StagingError(str(e)) from e
    if len(raw) > CONFIG_LIMIT:
        raise StagingError(f"adapter {settings.repo_id}@{sha}: {CONFIG_NAME} is over {CONFIG_LIMIT} bytes")
    problems = adapter_config_problems(
        raw, adapter=settings.repo_id, base_model_id=settings.adapter_base or None, max_lora_rank=settings.max_lora_rank
    )
    if problems:
        raise StagingError("; ".join(problems))
