"""The ``gguf_file`` setting: which GGUF file of a repository is staged and served.

GGUF repositories hold one file per quantization (``Model-Q4_K_M.gguf``, ``Model-Q8_0.gguf``, ...); large
ones are split into ``Model-Q4_K_M-00001-of-00003.gguf`` parts (llama.cpp's gguf-split naming,
llama_split_path in include/llama.h), which llama.cpp loads together from the first part. Staging copies
only the chosen file and its parts; the serving container is pointed at it through the model path.
"""

from __future__ import annotations

import re

GGUF_FILE = re.compile(r"(?!/)(?!.*(?:^|/)\.\.(?:/|$))[\w.*?\[\]/+=@-]{1,250}\.gguf", re.ASCII)
SPLIT_PART = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
# fnmatch has no repetition, so five digits are spelt out.
SPLIT_GLOB = "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].gguf"
DESCRIPTION = (
    "a .gguf file name or glob in the repository, such as Qwen3-8B-Q4_K_M.gguf or *Q4_K_M*.gguf "
    "(a split file's parts -00001-of-0000N.gguf are included)"
)


def staging_patterns(gguf_file: str) -> tuple[str, ...]:
    """Include globs that select ``gguf_file`` and its split parts, at the root or in a folder."""
    base = SPLIT_PART.sub("", gguf_file) if SPLIT_PART.search(gguf_file) else gguf_file[: -len(".gguf")]
    patterns = [gguf_file, base + SPLIT_GLOB]
    if "/" not in gguf_file:
        patterns += [f"*/{p}" for p in patterns]
    return tuple(dict.fromkeys(patterns))
