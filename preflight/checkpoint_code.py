"""Files in a checkpoint that a serving container would run as code or read as configuration.

The SageMaker vLLM image starts through ``standard-supervisor`` (aws/deep-learning-containers
scripts/docker/vllm/sagemaker_entrypoint.sh), which by default pip-installs ``requirements.txt``
found in the model directory (aws/model-hosting-container-standards common/dependency_manager.py,
``STANDARD_AUTO_INSTALL_REQ``) and imports ``model.py`` from it as a handler module
(sagemaker/sagemaker_loader.py, ``CUSTOM_SCRIPT_FILENAME`` default ``model.py``). DJL Serving (LMI) reads
``serving.properties`` there, whose settings override the environment, ``option.entryPoint`` (any Python file)
included (djl-serving serving/docs/lmi/deployment_guide/configurations.md). ``code/`` is where SageMaker's
framework containers look for an inference script. Which patterns apply to which engine is data
(constructs_lib/data/engines.json ``checkpoint_code``); the constructs hand the list to staging and to the
preflight. Staging leaves the files out and the preflight refuses a prefix holding them, unless the user
opts in with ``allow_checkpoint_code``. Standard library only: bundled into the preflight Lambda.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

# The patterns every engine gets (engines.json's top-level checkpoint_code;
# tests/constructs/test_checkpoint_code.py holds the two equal): what the preflight checks when a template names
# none. Glob patterns as staging matches them (fnmatch on the whole path; ``*`` crosses ``/``).
CHECKPOINT_CODE_PATTERNS = ("requirements.txt", "model.py", "code/*", "serving.properties")


def staging_exclude(
    exclude: Sequence[str], patterns: Sequence[str] = CHECKPOINT_CODE_PATTERNS, *, allow: bool = False
) -> tuple[str, ...]:
    """``exclude`` plus each code pattern it does not hold already; ``exclude`` alone when ``allow``."""
    if allow:
        return tuple(exclude)
    return tuple(exclude) + tuple(p for p in dict.fromkeys(patterns) if p not in exclude)


def code_files(paths: Iterable[str], patterns: Sequence[str] = CHECKPOINT_CODE_PATTERNS) -> list[str]:
    """The paths (relative to the model prefix) a serving container would install, run or read as its settings."""
    return sorted(p for p in paths if any(fnmatch.fnmatchcase(p, pattern) for pattern in patterns))


def _shown(found: Sequence[str]) -> str:
    return ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")


def code_files_problem(
    paths: Iterable[str], where: str, patterns: Sequence[str] = CHECKPOINT_CODE_PATTERNS
) -> str | None:
    """The refusal when the served prefix holds such files; None when it holds none."""
    found = code_files(paths, patterns)
    if not found:
        return None
    return (
        f"{where} holds {_shown(found)}, which the serving container would run as code or read as its settings "
        f"(files matching {', '.join(patterns)}): remove them from the prefix, or set allow_checkpoint_code=true "
        "for a repository and revision you have read"
    )


def code_files_note(paths: Iterable[str], where: str, patterns: Sequence[str] = CHECKPOINT_CODE_PATTERNS) -> str | None:
    """With ``allow_checkpoint_code``: a warning naming the files the container may run; None when none."""
    found = code_files(paths, patterns)
    if not found:
        return None
    return (
        f"{where} holds {_shown(found)}, which the serving container may run as code or read as its settings "
        "(allow_checkpoint_code is set)"
    )
