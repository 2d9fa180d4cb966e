"""AWS tag rules, checked at synth: the constructs refuse a tag AWS would refuse at deploy, the context layer names
its key.

Tag keys are 1-128 and values 0-256 Unicode letters, digits, spaces and ``_ . : / = + - @``; keys starting with
``aws:`` are reserved; each key once per resource (Tagging AWS Resources user guide, "Tag naming limits and
requirements"; botocore sagemaker service-2.json TagKey/TagValue patterns ``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*``,
TagList at most 50). A staging job carries two tags of its own (``JOB_TAG_KEYS``), so a user tag may not take
their keys, and the repository or archive it stages must be a tag value.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

from handler_kit.resources import JOB_TAG_KEYS

MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 256
# TagList holds at most 50 (botocore sagemaker service-2.json), two of a staging job's being its own.
MAX_TAGS = 50 - len(JOB_TAG_KEYS)
PUNCTUATION = "_.:/=+-@"
CHARACTERS = f"letters, digits, spaces and {' '.join(PUNCTUATION)}"
RESERVED_PREFIX = "aws:"


def is_tag_text(value: str) -> bool:
    """Whether every character of ``value`` is one AWS allows in a tag (\\p{L}, \\p{N}, \\p{Z} or the punctuation)."""
    return all(
        unicodedata.category(ch)[0] in "LNZ" or ch in PUNCTUATION  # \p{L} letters, \p{N} numbers, \p{Z} separators
        for ch in value
    )


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else f"{text[:60]}...")


def tag_key_problem(key: object) -> str | None:
    """Why AWS would refuse ``key`` as a tag key, or None."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_CHARS or not is_tag_text(key):
        return f"tag key {_shown(str(key))}{_why_not(str(key))} allowed: 1-{MAX_KEY_CHARS} {CHARACTERS}"
    if key.lower().startswith(RESERVED_PREFIX):
        return f"tag key {_shown(key)}: keys starting with {RESERVED_PREFIX} are reserved for AWS"
    return None


def _why_not(text: str) -> str:
    """`` holds '(', '#';`` or `` is 257 characters;``: what makes ``text`` no tag text."""
    bad = sorted({ch for ch in text if not is_tag_text(ch)})
    return f" holds {', '.join(repr(c) for c in bad)};" if bad else f" is {len(text)} characters;"


def tag_value_problem(key: str, value: object) -> str | None:
    """Why AWS would refuse ``value`` as the value of tag ``key``, or None."""
    if not isinstance(value, str):
        return f"tag {_shown(key)}={value!r}: a tag value must be text"
    if len(value) > MAX_VALUE_CHARS or not is_tag_text(value):
        return f"tag {_shown(key)}={_shown(value)}{_why_not(value)} allowed: 0-{MAX_VALUE_CHARS} {CHARACTERS}"
    return None


def tag_problems(tags: Mapping[str, object], *, reserved: Iterable[str] = JOB_TAG_KEYS) -> list[str]:
    """Every reason AWS would refuse ``tags`` (keys, values, count), and any key in ``reserved``: a key the
    construct sets itself, which AWS refuses to see twice on one resource."""
    problems = []
    own = set(reserved)
    for key, value in tags.items():
        if why := tag_key_problem(key):
            problems.append(why)
        elif key in own:  # tag keys are case-sensitive (Tagging AWS resources): HF-REPO-ID is another key
            problems.append(
                f"tag key {key!r}: the staging job sets it itself ({', '.join(sorted(own))}), and a resource takes "
                "each key once; choose another key"
            )
        if isinstance(key, str) and (why := tag_value_problem(key, value)):
            problems.append(why)
    if len(tags) > MAX_TAGS:
        problems.append(f"{len(tags)} tags; allowed: at most {MAX_TAGS} (50 a resource, {len(own)} of them its own)")
    return problems


def job_source_problem(source: str) -> str | None:
    """Why the staging job's tag ``hf-repo-id``, which holds what it stages (its first 256 characters:
    lambda/staged_checkpoint/staging_job.py), cannot hold ``source`` (an archive's ``s3://`` URI), or None."""
    if why := tag_value_problem(JOB_TAG_KEYS[0], source[:MAX_VALUE_CHARS]):
        return f"the staging job's tag {JOB_TAG_KEYS[0]} holds it, and AWS refuses it: {why}"
    return None
