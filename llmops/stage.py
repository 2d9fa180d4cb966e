"""Stage a Hugging Face model revision into S3, from your machine, with the worker the deployment runs.

    python -m llmops.stage --repo-id Qwen/Qwen3-8B --revision main --destination s3://bucket/models/

Same program and flags as the staging Processing job (``hfstage.worker``): nothing is written to local
disk; the token comes from ``--token-secret-arn`` or, by hand, from $HF_TOKEN. ``--help`` lists the flags.
"""

from __future__ import annotations

import sys

from hfstage.worker import main as worker_main


def main(argv: list[str] | None = None) -> int:
    return worker_main(sys.argv[1:] if argv is None else argv, prog="python -m llmops.stage")


if __name__ == "__main__":
    sys.exit(main())
