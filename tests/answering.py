"""A local HTTP server for the tests of kvplan's clients: it answers each path with the status and body a
test sets, on an ephemeral port, in a daemon thread."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kvplan.live.bench import Target


class Answering(ThreadingHTTPServer):
    """GET and POST of a path in `answers` get its (status, body); any other path gets `default`."""

    def __init__(self, answers: dict[str, tuple[int, bytes]] | None = None, default: tuple[int, bytes] = (404, b"")):
        self.answers, self.default = dict(answers or {}), default

        class Handler(BaseHTTPRequestHandler):
            def do_GET(handler):
                status, body = self.answers.get(handler.path, self.default)
                handler.send_response(status)
                handler.end_headers()
                handler.wfile.write(body)
            do_POST = do_GET

            def log_message(handler, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def target(self) -> Target:
        return Target.parse(f"http://127.0.0.1:{self.server_address[1]}")
