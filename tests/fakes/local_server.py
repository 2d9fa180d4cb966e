"""The HTTP server every fake listens with: ThreadingHTTPServer with daemon threads and a real listen backlog."""

from __future__ import annotations

from http.server import ThreadingHTTPServer


class LocalServer(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver.TCPServer listens with a backlog of 5 (Python docs, socketserver.BaseServer.request_queue_size):
    # when more clients connect at once (8 ranges of a file, 32 requests of a benchmark level), Linux drops the
    # surplus handshakes and the clients retry after 1 s (the initial SYN retransmission timeout): a second of
    # the fake's, not of the code under test. Real servers listen with far more (uvicorn's --backlog: 2048).
    request_queue_size = 1024
