"""Files in a checkpoint that a serving container would run as code, and how staging leaves them out.

The SageMaker vLLM image starts through ``standard-supervisor`` (aws/deep-learning-containers
scripts/docker/vllm/sagemaker_entrypoint.sh), which by default pip-installs ``requirements.txt``
found in the model directory and aborts start-up when that fails (aws/model-hosting-container-standards
python/model_hosting_container_standards/common/dependency_manager.py, ``STANDARD_AUTO_INSTALL_REQ``
default ``true``; supervisor/scripts/standard_supervisor.py) and imports ``model.py`` from it as a
handler module (sagemaker/sagemaker_loader.py, ``CUSTOM_SCRIPT_FILENAME`` default ``model.py``).
``code/`` is where SageMaker's framework containers look for an inference script. None of these
belongs to a Hub checkpoint's weights, so staging skips them unless the user includes them by name.
Standard library only: bundled into the preflight Lambda.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence

# Glob patterns as staging matches them (fnmatch on the whole path; ``*`` crosses ``/``).
CHECKPOINT_CODE_PATTERNS = ("requirements.txt", "model.py", "code/*")


def staging_exclude(include: Sequence[str], exclude: Sequence[str]) -> tuple[str, ...]:
    """``exclude`` plus each code pattern the user did not ask for by naming it in ``include``.

    Asking means an include pattern equal to the code pattern (``"model.py"``, ``"code/*"``): a broad
    pattern such as ``"*.py"`` (for ``trust_remote_code`` modeling files) does not ask for them.
    """
    asked = set(include)
    if "code/**" in asked:
        asked.add("code/*")
    added = tuple(p for p in CHECKPOINT_CODE_PATTERNS if p not in asked and p not in exclude)
    return tuple(exclude) + added


def code_files(paths: Iterable[str]) -> list[str]:
    """The paths (relative to the model prefix) a serving container would install or run."""
    return sorted(p for p in paths if any(fnmatch.fnmatchcase(p, pattern) for pattern in CHECKPOINT_CODE_PATTERNS))


def code_files_note(paths: Iterable[str], where: str) -> str | None:
    """A warning when the served prefix holds such files; None when it holds none."""
    found = code_files(paths)
    if not found:
        return None
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return (
        f"{where} holds {shown}: the vLLM image's standard-supervisor would pip-install a requirements.txt "
        "(STANDARD_AUTO_INSTALL_REQ, which this app sets to false) and imports model.py as a handler; remove "
        "them from the prefix unless you meant the container to run them"
    )
