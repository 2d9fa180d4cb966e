"""Which file names of a revision can become S3 keys under the revision prefix, and be downloaded back safely.

A file's key is the revision prefix plus its path exactly as the Hub lists it, and SageMaker downloads the
prefix into ``/opt/ml/model`` (an ``S3Prefix`` model data source) turning each key back into a local path.
So a listed path is data from the Hub, not a trusted name: ``..`` or ``.`` segments, an absolute path, empty
segments and backslashes can land outside or beside the intended file once mapped to a file system; control
and other non-printable characters hide what a name is in logs and consoles; and a name the worker owns (the
manifest, the resume area) would let a repository overwrite the manifest or forge a checkpoint. The worker
refuses the whole run before it writes anything when a file it would stage has such a name; files that the
include/exclude patterns leave out are never written, so their names do not matter.

Names that differ only in case are different S3 keys and different files on Linux: they are fine.
"""

from __future__ import annotations

from collections.abc import Iterable

from hfstage.hub import HubError, HubFile
from hfstage.manifest import MANIFEST_NAME
from hfstage.transfer import CHECKPOINT_DIR, MAX_KEY_BYTES

# The names the worker writes under a revision prefix: a repository file may neither be one nor lie below one.
OWNED_NAMES = {MANIFEST_NAME: "the worker's manifest", CHECKPOINT_DIR.rstrip("/"): "the worker's resume area"}
# Longest file or folder name most Linux file systems hold (NAME_MAX, 255 bytes: ext4, xfs; limits.h).
MAX_SEGMENT_BYTES = 255
SHOWN = 5  # names quoted in a refusal; the rest are counted
SHOWN_CHARS = 80  # of each quoted name
MESSAGE_BYTES = 900  # the worker's failure message is at most 1,000 bytes (MESSAGE_LIMIT), SageMaker shows 1 KB


class UnsafeFileNames(HubError):
    """Files the run would stage have names that cannot be staged safely; nothing was written."""


def path_problem(path: object, prefix: str = "") -> str | None:
    """Why ``path`` cannot be staged as the key ``prefix + path``; None when it can."""
    if not isinstance(path, str):
        return "not a string"
    if not path:
        return "an empty name"
    try:
        size = len((prefix + path).encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: JSON's \ud800 decodes to one, UTF-8 cannot hold it
        return "not valid Unicode (a lone surrogate)"
    for char in path:
        # str.isprintable: false for Unicode's "Other" (control, format, surrogate, private use, unassigned)
        # and "Separator" categories except the ASCII space (Python docs, str.isprintable).
        if not char.isprintable():
            return f"a control or non-printable character (U+{ord(char):04X})"
    if "\\" in path:
        return "a backslash (a folder separator on Windows)"
    if path.startswith("/"):
        return "an absolute path"
    if path.endswith("/"):
        return "a trailing slash"
    segments = path.split("/")
    if "" in segments:
        return "an empty folder name (//)"
    if any(segment in (".", "..") for segment in segments):
        return "a '.' or '..' segment"
    if any(len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES for segment in segments):
        return f"a file or folder name over {MAX_SEGMENT_BYTES} bytes"
    if size > MAX_KEY_BYTES:  # S3 object keys are at most 1,024 bytes of UTF-8 (S3 User Guide, object-keys.html)
        return f"its S3 key would be {size} bytes, over S3's {MAX_KEY_BYTES}"
    for owned, what in OWNED_NAMES.items():
        if path == owned or path.startswith(owned + "/"):
            return what if path == owned else f"inside {what}"
    return None


def unsafe_paths(paths: Iterable[object], prefix: str = "") -> list[tuple[object, str]]:
    """(path, reason) for each path that cannot be staged under ``prefix``, in the order given: unsafe names,
    names listed twice, and names that are both a file and the folder of another file."""
    paths = list(paths)
    problems: list[tuple[object, str]] = []
    seen: set[str] = set()
    folders = {p[:i] for p in paths if isinstance(p, str) for i, c in enumerate(p) if c == "/"}
    for path in paths:
        reason = path_problem(path, prefix)
        if reason is None and isinstance(path, str):
            if path in seen:
                reason = "listed twice"
            elif path in folders:
                reason = "both a file and the folder of other files"
            seen.add(path)
        if reason is not None:
            problems.append((path, reason))
    return problems


def _shown(path: object) -> str:
    text = repr(path)  # repr escapes every non-printable character (\n, \x00, \u202e)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 4] + "...'"


def format_refusal(counted: str, problems: list[tuple[object, str]], advice: str) -> str:
    """One line under MESSAGE_BYTES: ``counted`` (e.g. "3 of the 40 files"), up to SHOWN names with reasons."""
    head = f"{counted} {'has a name' if len(problems) == 1 else 'have names'} that cannot be staged safely: "
    tail = f"; {advice}"
    shown: list[str] = []
    for path, reason in problems[:SHOWN]:
        item = f"{_shown(path)} ({reason})"
        more = len(problems) - len(shown) - 1
        rest = f" and {more} more" if more else ""
        if len((head + ", ".join([*shown, item]) + rest + tail).encode("utf-8")) > MESSAGE_BYTES:
            break
        shown.append(item)
    more = len(problems) - len(shown)
    return head + ", ".join(shown) + (f" and {more} more" if more else "") + tail


def refuse_unsafe(files: Iterable[HubFile], prefix: str) -> None:
    """Raise UnsafeFileNames naming the files that cannot be staged under ``prefix`` (one line, under 1 KB)."""
    files = list(files)
    problems = unsafe_paths((f.path for f in files), prefix)
    if not problems:
        return
    raise UnsafeFileNames(
        "refused before any upload: "
        + format_refusal(
            f"{len(problems)} of the {len(files)} files to stage",
            problems,
            "leave them out with exclude patterns, or stage another revision",
        )
    )


__all__ = ["OWNED_NAMES", "UnsafeFileNames", "format_refusal", "path_problem", "refuse_unsafe", "unsafe_paths"]
