"""A model's metadata from the Hugging Face Hub, without its weights: config.json, weight sizes, quantization.

Uses ``huggingface_hub`` (the client users know): ``HfApi.model_info(files_metadata=True)`` for the
files and their sizes, ``hf_hub_download`` for ``config.json`` only. ``HF_ENDPOINT`` is read when the
call is made (so a mirror or a test Hub set after import is honoured); the token comes from
``--hf-token-secret-arn`` (Secrets Manager, read as the staging worker reads it) or ``$HF_TOKEN``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import safejson
from preflight import select_weight_files

CONFIG = "config.json"
# Hub tag on repositories that declare themselves a quantization of another model (model card base_model
# with base_model_relation: quantized): https://huggingface.co/docs/hub/model-cards#specifying-a-base-model
QUANTIZED_OF = "base_model:quantized:{}"
VARIANTS_SHOWN = 5
# Where a token comes from, as the command at hand takes it: the errors below name it (llmops.plan's flags by
# default; -c and llmops.facts take the context key).
FLAG_TOKEN_HINT = (
    "HF_TOKEN in the environment, or --hf-token-secret-arn with the Secrets Manager secret the deployment uses"
)
CONTEXT_TOKEN_HINT = (
    "HF_TOKEN in the environment, or the context key hf_token_secret_arn (-c or cdk.json) naming the Secrets "
    "Manager secret the deployment uses"
)


class HubError(Exception):
    """The Hub could not answer; the message says why and what to do (never the token)."""


@dataclass(frozen=True)
class HubModel:
    repo_id: str
    sha: str
    config: dict[str, Any]
    weight_bytes: int
    weight_files: tuple[str, ...]
    gated: bool
    notes: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # every file of the revision, with its size


def endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def read_token(secret_arn: str | None) -> str | None:
    """The token from Secrets Manager (``secret_arn``) or ``$HF_TOKEN``; HubError when the secret is unusable."""
    from hfstage.worker import Failure
    from hfstage.worker import read_token as read

    try:
        return read(secret_arn)
    except Failure as e:
        raise HubError(str(e)) from None


def _api(token: str | None) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint(), token=token or False)


def _explain(
    error: Exception, repo_id: str, revision: str | None, token: str | None, token_hint: str = FLAG_TOKEN_HINT
) -> HubError:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo_id}@{revision}" if revision else repo_id
    if isinstance(error, GatedRepoError):
        if token:
            return HubError(
                f"{repo_id} is gated and the token given has no access to it: accept the model's terms on its Hub "
                "page with the account the token belongs to"
            )
        return HubError(
            f"{repo_id} is gated: accept its terms on the Hub, then give a token with read access ({token_hint})"
        )
    if isinstance(error, RevisionNotFoundError):
        return HubError(f"{where}: no such revision (a branch, tag or commit SHA) on the Hub")
    if isinstance(error, RepositoryNotFoundError):
        hint = "" if token else f" (a private repository needs a token: {token_hint})"
        return HubError(f"{repo_id}: repository not found on {endpoint() or 'the Hub'}{hint}")
    if isinstance(error, EntryNotFoundError):
        return HubError(f"{where} has no {CONFIG}: plan needs a transformers-style checkpoint")
    if isinstance(error, RecursionError):  # huggingface_hub decodes the Hub's answer with json, which recurses
        return HubError(
            f"could not read {where} from {endpoint() or 'https://huggingface.co'}: the answer is JSON "
            "nested too deep to read"
        )
    return HubError(
        f"could not read {where} from {endpoint() or 'https://huggingface.co'}: {type(error).__name__}: "
        f"{str(error).splitlines()[0] if str(error) else 'no answer'}"
    )


def fetch_model(
    repo_id: str,
    revision: str | None = None,
    *,
    token: str | None = None,
    timeout: float | None = None,
    token_hint: str = FLAG_TOKEN_HINT,
) -> HubModel:
    """config.json and the weight files' total size of ``repo_id`` at ``revision`` (default: main).

    timeout: seconds per request. Default: huggingface_hub's (10 s for config.json's metadata request).
    """
    from huggingface_hub import hf_hub_download

    api = _api(token)
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True, timeout=timeout)
        path = hf_hub_download(
            repo_id,
            CONFIG,
            revision=info.sha or revision,
            token=token or False,
            endpoint=endpoint(),
            etag_timeout=timeout or 10,
        )
    # The network boundary: huggingface_hub's own errors, and its HTTP client's (connection refused, DNS, TLS,
    # timeouts) which are not OSError; each becomes one line, never a traceback.
    except Exception as e:
        raise _explain(e, repo_id, revision, token, token_hint) from None
    try:
        with open(path, "rb") as f:
            config = safejson.loads(f.read(safejson.MAX_SIZE + 1), source=f"{repo_id}: {CONFIG}")
    except OSError as e:
        raise HubError(f"{repo_id}: {CONFIG} is not valid JSON: {e}") from None
    except safejson.JsonError as e:  # names the repository and the file
        raise HubError(str(e)) from None
    if not isinstance(config, dict):
        raise HubError(f"{repo_id}: {CONFIG} is not a JSON object")

    sizes = _sizes(info, repo_id, token, timeout, token_hint)
    weights = select_weight_files(sizes)
    if not weights.files:
        raise HubError(f"{repo_id}: no weight files (*.safetensors, *.bin, *.gguf) in the repository")
    sha = info.sha or revision or "main"
    notes = [f"weights: {weights.total_bytes:,} bytes in {len(weights.files)} file(s) of {repo_id}@{sha[:12]} (Hub)"]
    notes += [f"weights: {n}" for n in weights.notes]
    return HubModel(
        repo_id=repo_id,
        sha=sha,
        config=config,
        weight_bytes=weights.total_bytes,
        weight_files=weights.files,
        gated=bool(info.gated),
        notes=notes,
        sizes=sizes,
    )


def fetch_files(
    repo_id: str,
    revision: str | None = None,
    *,
    token: str | None = None,
    timeout: float | None = None,
    token_hint: str = FLAG_TOKEN_HINT,
) -> tuple[str, dict[str, int]]:
    """(commit SHA, every file's size) of ``repo_id`` at ``revision``; HubError when the Hub cannot answer."""
    try:
        info = _api(token).model_info(repo_id, revision=revision, files_metadata=True, timeout=timeout)
    except Exception as e:  # the network boundary, as in fetch_model
        raise _explain(e, repo_id, revision, token, token_hint) from None
    return info.sha or revision or "main", _sizes(info, repo_id, token, timeout, token_hint)


def _sizes(info: Any, repo_id: str, token: str | None, timeout: float | None, token_hint: str) -> dict[str, int]:
    """Every file's size: from the listing, or, for a file a mirror lists without one (no ``blobs=true``
    answer), from a HEAD of the file as huggingface_hub reads it (get_hf_file_metadata: ``X-Linked-Size``, or
    ``Content-Length`` when not redirected). HubError when neither says: a size of 0 would plan a model as
    fitting."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    sizes = {}
    for sibling in info.siblings or []:
        size = sibling.size
        if size is None:
            url = hf_hub_url(repo_id, sibling.rfilename, revision=info.sha, endpoint=endpoint())
            try:
                size = get_hf_file_metadata(url, token=token or False, timeout=timeout or 10).size
            except Exception as e:  # the network boundary, as in fetch_model
                raise _explain(e, repo_id, info.sha, token, token_hint) from None
            if size is None:
                raise HubError(
                    f"{repo_id}@{info.sha}: neither the listing nor a HEAD of {sibling.rfilename} gives its size "
                    "(X-Linked-Size or Content-Length): the mirror answers less than the Hub; plan needs each size"
                )
        sizes[sibling.rfilename] = int(size)
    return sizes


def gguf_reader(
    repo_id: str,
    sha: str,
    path: str,
    *,
    token: str | None = None,
    timeout: float | None = None,
    token_hint: str = FLAG_TOKEN_HINT,
) -> Callable[[int, int], bytes]:
    """Range GETs of one file on the Hub (``/resolve/<sha>/<path>``, redirected to its CDN for LFS files), for
    :func:`preflight.gguf.read_header`: the header only, never the weights. HubError on a failed read."""
    from huggingface_hub import get_session, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    url = hf_hub_url(repo_id, path, revision=sha, endpoint=endpoint())
    headers = build_hf_headers(token=token or False)

    def read_at(offset: int, length: int) -> bytes:
        try:
            # httpx drops Authorization on a redirect to another origin (the CDN), as huggingface_hub relies on.
            answer = get_session().get(
                url,
                headers={**headers, "Range": f"bytes={offset}-{offset + length - 1}"},
                follow_redirects=True,
                timeout=timeout or 10,
            )
        except Exception as e:
            raise _explain(e, repo_id, sha, token, token_hint) from None
        if answer.status_code == 416:  # Range Not Satisfiable: past the end of the file
            return b""
        if answer.status_code not in (200, 206):
            raise HubError(f"could not read {repo_id}@{sha[:12]}/{path}: HTTP {answer.status_code}")
        body = answer.content
        return body if answer.status_code == 206 else body[offset : offset + length]

    return read_at


def quantized_variants(repo_id: str, *, token: str | None = None, limit: int = VARIANTS_SHOWN) -> list[str]:
    """Repositories that declare themselves quantizations of ``repo_id``, most downloaded first ([] on error)."""
    from huggingface_hub.errors import HfHubHTTPError

    try:
        found = _api(token).list_models(
            filter=QUANTIZED_OF.format(repo_id), sort="downloads", limit=limit, expand=["downloads"]
        )
        return [m.id for m in found]
    except (HfHubHTTPError, OSError, ValueError):
        return []
