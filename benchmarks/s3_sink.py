"""A small, fast, local S3 endpoint that counts what it receives and keeps only small objects.

    python benchmarks/s3_sink.py [--port 0] [--verify-crc]     # prints "PORT <n>" once listening

moto's S3 server keeps every byte in memory and moves tens of MiB/s; a staging benchmark moves GiBs.
This sink speaks just enough path-style S3 for boto3: CreateBucket, CreateMultipartUpload, UploadPart,
CompleteMultipartUpload, AbortMultipartUpload, ListMultipartUploads, ListParts, PutObject, HeadObject, GetObject
(objects of at most 1 MiB keep their bytes, e.g. a manifest), DeleteObject and ListObjectsV2. Bodies
larger than that are read, counted (and, with ``--verify-crc``, checked against their
``x-amz-checksum-crc32``) and discarded. ``GET /_stats`` answers counters and the server's CPU time as
JSON. Usable in-process too: ``S3Sink().start()``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import resource
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from xml.etree import ElementTree
from xml.sax.saxutils import escape

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from hfstage.checksum import CRC32, Algorithm, Running
from hfstage.checksum import best as best_checksum

# The algorithms S3 verifies that this sink checks: the header a request carries picks one (x-amz-checksum-<name>).
ALGORITHMS = {algorithm.name.lower(): algorithm for algorithm in (CRC32, best_checksum())}

KEEP_BODY_LIMIT = 1024 * 1024
READ_CHUNK = 1024 * 1024
NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # not socketserver's 5: see tests/fakes/local_server.py (this file runs alone)


@dataclass
class StoredObject:
    size: int
    etag: str
    metadata: dict[str, str]
    content_type: str
    last_modified: float
    body: bytes | None = None


@dataclass
class Upload:
    bucket: str
    key: str
    metadata: dict[str, str]
    content_type: str
    initiated: float
    parts: dict[int, tuple[int, str]] = field(default_factory=dict)  # number -> (size, etag)
    checksums: dict[int, str] = field(default_factory=dict)  # number -> the part's x-amz-checksum-<algorithm>
    values: dict[int, int] = field(default_factory=dict)  # number -> that checksum's value, as computed here
    algorithm: str = ""  # x-amz-checksum-algorithm of CreateMultipartUpload, lower case


@dataclass
class Stats:
    bytes_received: int = 0
    requests: dict[str, int] = field(default_factory=dict)
    crc_mismatches: int = 0
    max_concurrent_uploads: int = 0


class S3Sink:
    def __init__(self, port: int = 0, verify_crc: bool = False) -> None:
        self.verify_crc = verify_crc
        self.buckets: dict[str, dict[str, StoredObject]] = {}
        self.uploads: dict[str, Upload] = {}
        self.stats = Stats()
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        handler = type("SinkHandler", (_Handler,), {"sink": self})
        self.server = _Server(("127.0.0.1", port), handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread: threading.Thread | None = None

    def start(self) -> S3Sink:
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, operation: str) -> None:
        with self.lock:
            self.stats.requests[operation] = self.stats.requests.get(operation, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with self.lock:
            return {
                "bytes_received": self.stats.bytes_received,
                "requests": dict(self.stats.requests),
                "crc_mismatches": self.stats.crc_mismatches,
                "open_uploads": len(self.uploads),
                "max_concurrent_uploads": self.stats.max_concurrent_uploads,
                "objects": sum(len(b) for b in self.buckets.values()),
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "max_rss_kib": usage.ru_maxrss,
            }


def _xml(root: str, fields: list[tuple[str, Any]]) -> bytes:
    body = "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in fields)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{NS}">{body}</{root}>'.encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and "100 Continue" for botocore's Expect header
    sink: S3Sink

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- helpers -------------------------------------------------------------------------------------

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if status != 204 and "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        body = b"" if self.command == "HEAD" else _xml("Error", [("Code", code), ("Message", message)])
        self._reply(status, body, {"Content-Type": "application/xml"})

    def _target(self) -> tuple[str, str, dict[str, list[str]]]:
        url = urllib.parse.urlsplit(self.path)
        bucket, _, key = url.path.lstrip("/").partition("/")
        return urllib.parse.unquote(bucket), urllib.parse.unquote(key), urllib.parse.parse_qs(url.query, True)

    def _metadata(self) -> dict[str, str]:
        return {
            k.lower()[len("x-amz-meta-") :]: v for k, v in self.headers.items() if k.lower().startswith("x-amz-meta-")
        }

    def _algorithm(self) -> Algorithm | None:
        """The algorithm of the checksum header this request carries (None: none this sink checks)."""
        return next((a for name, a in ALGORITHMS.items() if self.headers.get(f"x-amz-checksum-{name}")), None)

    def _read_body(self, keep: bool) -> tuple[int, bytes | None, int]:
        """Read the request body (plain or aws-chunked); (size, the bytes if kept, its checksum's value)."""
        kept = bytearray() if keep else None
        crc = 0
        algorithm = self._algorithm() if self.sink.verify_crc else None
        size = 0
        buffer = bytearray(READ_CHUNK)
        view = memoryview(buffer)

        def consume(n: int) -> None:
            nonlocal crc, size
            while n > 0:
                got = self.rfile.readinto(view[: min(n, READ_CHUNK)])
                if not got:
                    raise ConnectionError("body ended early")
                if algorithm is not None:
                    crc = algorithm.compute(view[:got], crc)
                if kept is not None:
                    kept.extend(view[:got])
                size += got
                n -= got

        if "aws-chunked" in (self.headers.get("Content-Encoding") or ""):
            while True:
                line = self.rfile.readline().strip()
                length = int(line.split(b";")[0], 16)
                if length == 0:
                    while self.rfile.readline().strip():  # trailers, then a blank line
                        pass
                    break
                consume(length)
                self.rfile.readline()
        else:
            consume(int(self.headers.get("Content-Length") or 0))
        with self.sink.lock:
            self.sink.stats.bytes_received += size
        return size, (bytes(kept) if kept is not None else None), crc

    def _check_crc(self, crc: int) -> bool:
        algorithm = self._algorithm()
        if not self.sink.verify_crc or algorithm is None:
            return True
        if algorithm.decode(self.headers[f"x-amz-checksum-{algorithm.name.lower()}"]) == crc:
            return True
        with self.sink.lock:
            self.sink.stats.crc_mismatches += 1
        return False

    # -- verbs ---------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self.path == "/_stats":
            self._reply(200, json.dumps(self.sink.snapshot()).encode(), {"Content-Type": "application/json"})
            return
        bucket, key, query = self._target()
        if bucket not in self.sink.buckets:
            self._error(404, "NoSuchBucket", "The specified bucket does not exist")
        elif not key and "uploads" in query:
            self._list_uploads(bucket, query)
        elif key and "uploadId" in query:
            self._list_parts(query["uploadId"][0])
        elif not key:
            self._list_objects(bucket, query)
        else:
            self._get(bucket, key)

    def do_HEAD(self) -> None:
        bucket, key, _ = self._target()
        self.sink.count("HeadObject")
        obj = self.sink.buckets.get(bucket, {}).get(key)
        if obj is None:
            self._error(404, "NoSuchKey", "Not found")
            return
        self._reply(200, b"", self._object_headers(obj, with_length=False) | {"Content-Length": str(obj.size)})

    def _object_headers(self, obj: StoredObject, with_length: bool = True) -> dict[str, str]:
        headers = {
            "ETag": obj.etag,
            "Last-Modified": formatdate(obj.last_modified, usegmt=True),
            "Content-Type": obj.content_type,
            "Accept-Ranges": "bytes",
        }
        headers.update({f"x-amz-meta-{k}": v for k, v in obj.metadata.items()})
        return headers

    def _get(self, bucket: str, key: str) -> None:
        self.sink.count("GetObject")
        obj = self.sink.buckets[bucket].get(key)
        if obj is None:
            self._error(404, "NoSuchKey", "The specified key does not exist.")
        elif obj.body is None:
            self._error(501, "NotImplemented", "this sink discarded the body of objects over 1 MiB")
        else:
            self._reply(200, obj.body, self._object_headers(obj))

    def do_PUT(self) -> None:
        bucket, key, query = self._target()
        if not key:
            self.sink.count("CreateBucket")
            self.sink.buckets.setdefault(bucket, {})
            self._reply(200, b"", {"Location": f"/{bucket}"})
            return
        if bucket not in self.sink.buckets:
            self._read_body(keep=False)
            self._error(404, "NoSuchBucket", "The specified bucket does not exist")
            return
        if "uploadId" in query:
            self._upload_part(bucket, key, query)
            return
        self.sink.count("PutObject")
        length = int(self.headers.get("x-amz-decoded-content-length") or self.headers.get("Content-Length") or 0)
        size, body, crc = self._read_body(keep=length <= KEEP_BODY_LIMIT)
        if not self._check_crc(crc):
            self._error(400, "BadDigest", "The checksum you specified did not match the calculated checksum.")
            return
        etag = f'"{hashlib.md5(body).hexdigest() if body is not None else format(crc, "032x")}"'
        self.sink.buckets[bucket][key] = StoredObject(
            size, etag, self._metadata(), self.headers.get("Content-Type") or "binary/octet-stream", time.time(), body
        )
        self._reply(200, b"", {"ETag": etag})

    def _upload_part(self, bucket: str, key: str, query: dict[str, list[str]]) -> None:
        self.sink.count("UploadPart")
        upload_id = query["uploadId"][0]
        number = int(query["partNumber"][0])
        size, _, crc = self._read_body(keep=False)
        upload = self.sink.uploads.get(upload_id)
        if upload is None:
            self._error(404, "NoSuchUpload", "The specified upload does not exist.")
            return
        if not self._check_crc(crc):
            self._error(400, "BadDigest", "The checksum you specified did not match the calculated checksum.")
            return
        etag = f'"{next(self.sink._ids):032x}"'
        with self.sink.lock:
            upload.parts[number] = (size, etag)
            header = f"x-amz-checksum-{upload.algorithm}"
            upload.checksums[number] = self.headers.get(header) or ""
            upload.values[number] = crc
        headers = {"ETag": etag}
        if self.headers.get(header):
            headers[header] = self.headers[header]
        self._reply(200, b"", headers)

    def do_POST(self) -> None:
        bucket, key, query = self._target()
        if bucket not in self.sink.buckets:
            self._error(404, "NoSuchBucket", "The specified bucket does not exist")
        elif "uploads" in query:
            self.sink.count("CreateMultipartUpload")
            upload_id = f"upload-{next(self.sink._ids)}"
            content_type = self.headers.get("Content-Type") or "binary/octet-stream"
            with self.sink.lock:
                self.sink.uploads[upload_id] = Upload(
                    bucket,
                    key,
                    self._metadata(),
                    content_type,
                    time.time(),
                    algorithm=(self.headers.get("x-amz-checksum-algorithm") or "").lower(),
                )
                self.sink.stats.max_concurrent_uploads = max(
                    self.sink.stats.max_concurrent_uploads, len(self.sink.uploads)
                )
            self._reply(
                200,
                _xml("InitiateMultipartUploadResult", [("Bucket", bucket), ("Key", key), ("UploadId", upload_id)]),
                {"Content-Type": "application/xml"},
            )
        elif "uploadId" in query:
            self._complete(bucket, key, query["uploadId"][0])
        else:
            self._error(400, "InvalidRequest", "unsupported POST")

    def _complete(self, bucket: str, key: str, upload_id: str) -> None:
        self.sink.count("CompleteMultipartUpload")
        _, body, _ = self._read_body(keep=True)
        upload = self.sink.uploads.get(upload_id)
        if upload is None:
            self._error(404, "NoSuchUpload", "The specified upload does not exist.")
            return
        numbers = [int(e.text or 0) for e in ElementTree.fromstring(body or b"<x/>").iter(f"{{{NS}}}PartNumber")]
        numbers = numbers or [int(e.text or 0) for e in ElementTree.fromstring(body or b"<x/>").iter("PartNumber")]
        if not numbers or numbers != sorted(numbers) or any(n not in upload.parts for n in numbers):
            self._error(400, "InvalidPart", "One or more of the specified parts could not be found.")
            return
        size = sum(upload.parts[n][0] for n in numbers)
        # A full object checksum (S3 User Guide, checking-object-integrity.html) and the size S3 is told to expect.
        algorithm = ALGORITHMS.get(upload.algorithm)
        whole = self.headers.get(f"x-amz-checksum-{upload.algorithm}") if algorithm else None
        if self.sink.verify_crc and algorithm is not None and whole:
            joined = Running(algorithm)
            for n in numbers:
                joined.append(upload.values[n], upload.parts[n][0])
            if algorithm.decode(whole) != joined.value:
                with self.sink.lock:
                    self.sink.stats.crc_mismatches += 1
                self._error(400, "BadDigest", "The full object checksum did not match the parts' bytes.")
                return
        expected_size = self.headers.get("x-amz-mp-object-size")
        if expected_size is not None and int(expected_size) != size:
            self._error(400, "InvalidRequest", f"MpuObjectSize {expected_size} differs from the parts' {size} bytes")
            return
        etag = f'"{hashlib.md5(upload_id.encode()).hexdigest()}-{len(numbers)}"'
        with self.sink.lock:
            self.sink.buckets[bucket][key] = StoredObject(size, etag, upload.metadata, upload.content_type, time.time())
            del self.sink.uploads[upload_id]
        fields = [
            ("Location", f"{self.sink.endpoint}/{bucket}/{key}"),
            ("Bucket", bucket),
            ("Key", key),
            ("ETag", etag),
        ]
        self._reply(200, _xml("CompleteMultipartUploadResult", fields), {"Content-Type": "application/xml"})

    def do_DELETE(self) -> None:
        bucket, key, query = self._target()
        if "uploadId" in query:
            self.sink.count("AbortMultipartUpload")
            with self.sink.lock:
                self.sink.uploads.pop(query["uploadId"][0], None)
        else:
            self.sink.count("DeleteObject")
            with self.sink.lock:
                self.sink.buckets.get(bucket, {}).pop(key, None)
        self._reply(204)

    # -- listings ------------------------------------------------------------------------------------

    def _list_uploads(self, bucket: str, query: dict[str, list[str]]) -> None:
        self.sink.count("ListMultipartUploads")
        prefix = query.get("prefix", [""])[0]
        with self.sink.lock:
            uploads = [(i, u) for i, u in self.sink.uploads.items() if u.bucket == bucket and u.key.startswith(prefix)]
        items = "".join(
            f"<Upload><Key>{escape(u.key)}</Key><UploadId>{i}</UploadId>"
            f"<Initiated>{time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime(u.initiated))}</Initiated></Upload>"
            for i, u in uploads
        )
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult xmlns="{NS}">'
            f"<Bucket>{escape(bucket)}</Bucket><Prefix>{escape(prefix)}</Prefix><IsTruncated>false</IsTruncated>"
            f"{items}</ListMultipartUploadsResult>"
        ).encode()
        self._reply(200, body, {"Content-Type": "application/xml"})

    def _list_parts(self, upload_id: str) -> None:
        self.sink.count("ListParts")
        with self.sink.lock:
            upload = self.sink.uploads.get(upload_id)
            parts = sorted(upload.parts.items()) if upload else []
            checksums = dict(upload.checksums) if upload else {}
            tag = "Checksum" + (ALGORITHMS[upload.algorithm].name if upload and upload.algorithm in ALGORITHMS else "")
        if upload is None:
            self._error(404, "NoSuchUpload", "The specified upload does not exist.")
            return
        items = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag><Size>{size}</Size>"
            + (f"<{tag}>{checksums[n]}</{tag}>" if checksums.get(n) else "")
            + "</Part>"
            for n, (size, etag) in parts
        )
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<ListPartsResult xmlns="{NS}">'
            f"<UploadId>{upload_id}</UploadId><IsTruncated>false</IsTruncated>{items}</ListPartsResult>"
        ).encode()
        self._reply(200, body, {"Content-Type": "application/xml"})

    def _list_objects(self, bucket: str, query: dict[str, list[str]]) -> None:
        self.sink.count("ListObjectsV2")
        prefix = query.get("prefix", [""])[0]
        with self.sink.lock:
            objects = sorted((k, o) for k, o in self.sink.buckets[bucket].items() if k.startswith(prefix))
        items = "".join(
            f"<Contents><Key>{escape(k)}</Key><Size>{o.size}</Size><ETag>{escape(o.etag)}</ETag>"
            f"<LastModified>{time.strftime('%Y-%m-%dT%H:%M:%S.000Z', time.gmtime(o.last_modified))}</LastModified>"
            f"</Contents>"
            for k, o in objects
        )
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="{NS}">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix><KeyCount>{len(objects)}</KeyCount>"
            f"<IsTruncated>false</IsTruncated>{items}</ListBucketResult>"
        ).encode()
        self._reply(200, body, {"Content-Type": "application/xml"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--verify-crc", action="store_true", help="check each body against x-amz-checksum-crc32")
    args = parser.parse_args(argv)
    sink = S3Sink(args.port, verify_crc=args.verify_crc)
    print(f"PORT {sink.server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        sink.server.serve_forever(poll_interval=0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
