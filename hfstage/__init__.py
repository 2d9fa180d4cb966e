"""Stage a Hugging Face model revision into S3: streamed, verified, resumable, shardable over hosts.

Standard library and boto3 only: this package runs inside a SageMaker Processing job on a stock CPU
image, shipped as a zip (``python3 hfstage.zip --repo-id ... --destination s3://...``), and is bundled
into the staging custom resource's Lambda. Imports inside the package are absolute (``hfstage.x``) so it
works from a zip root, a Lambda asset and the repository alike.
"""

import os

# botocore signs with awscrt whenever it can import it (botocore/compat.py: HAS_CRT, unless BOTO_DISABLE_CRT is
# "true"), and its CRT signer copies every request body once more (botocore/crt/auth.py,
# _crt_request_from_aws_request): 0.5 CPU-s per GB of parts, measured with benchmarks/staging.py. hfstage uses
# awscrt for checksums only (hfstage/checksum.py), so it keeps botocore's own signer, unless told otherwise.
os.environ.setdefault("BOTO_DISABLE_CRT", "true")

from hfstage.hub import (
    EntryNotFound,
    GatedRepo,
    HubClient,
    HubError,
    HubFile,
    RepoNotFound,
    RepoRevision,
    RevisionNotFound,
    UnsafeRedirect,
    select_files,
)
from hfstage.manifest import (
    MANIFEST_NAME,
    METADATA_KEYS,
    build_manifest,
    manifest_matches,
    missing_files,
    object_matches,
    read_manifest,
    revision_prefix,
)
from hfstage.names import OWNED_NAMES, UnsafeFileNames, path_problem, refuse_unsafe, unsafe_paths
from hfstage.shard import assign, leader, read_hosts
from hfstage.transfer import part_size_for

__all__ = [
    "MANIFEST_NAME",
    "METADATA_KEYS",
    "OWNED_NAMES",
    "EntryNotFound",
    "GatedRepo",
    "HubClient",
    "HubError",
    "HubFile",
    "RepoNotFound",
    "RepoRevision",
    "RevisionNotFound",
    "UnsafeFileNames",
    "UnsafeRedirect",
    "assign",
    "build_manifest",
    "leader",
    "manifest_matches",
    "missing_files",
    "object_matches",
    "part_size_for",
    "path_problem",
    "read_hosts",
    "read_manifest",
    "refuse_unsafe",
    "revision_prefix",
    "select_files",
    "unsafe_paths",
]
