"""``python -m bench.pgsync_proxy PORT UPSTREAM``: Elasticsearch as PGSync's client expects it, for ``bench.documents``.

PGSync's client (elasticsearch-py 7.17) first asks ``GET /`` for the
cluster's product and version, and refuses a server that does not answer
it; the stack's Elasticsearch answers ``GET /`` with 405. This proxy, on
loopback, answers ``GET /`` itself with the cluster's name and version (read
from ``/_nodes/_local``) and the ``X-Elastic-Product`` header, and forwards
every other request to ``UPSTREAM`` unchanged, bodies as bytes, one upstream
connection per client connection. It runs as its own process, so its work
competes with neither the bench's pollers nor PGSync for one interpreter.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host"}


def _info(upstream: str) -> bytes:
    parts = urlsplit(upstream)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 9200, timeout=30)
    conn.request("GET", "/_nodes/_local?filter_path=cluster_name,nodes.*.name,nodes.*.version")
    nodes = json.loads(conn.getresponse().read())
    conn.close()
    node = next(iter(nodes["nodes"].values()))
    info = {
        "name": node["name"],
        "cluster_name": nodes["cluster_name"],
        "version": {
            "number": node["version"],
            "build_flavor": "default",
            "lucene_version": "",
            "minimum_wire_compatibility_version": "7.17.0",
            "minimum_index_compatibility_version": "7.0.0",
        },  # fmt: skip
        "tagline": "You Know, for Search",
    }
    return json.dumps(info).encode()


def serve(port: int, upstream: str) -> None:
    info = _info(upstream)
    parts = urlsplit(upstream)
    local = threading.local()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

        def _upstream(self) -> http.client.HTTPConnection:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 9200, timeout=300)
            return conn

        def _forward(self) -> None:
            if self.command in ("GET", "HEAD") and self.path.split("?", 1)[0] in ("", "/"):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Elastic-Product", "Elasticsearch")
                self.send_header("Content-Length", str(len(info)))
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(info)
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            for attempt in (1, 2):  # a keep-alive connection the server closed meanwhile: once more, anew
                conn = self._upstream()
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                    break
                except (http.client.HTTPException, OSError):
                    conn.close()
                    local.conn = None
                    if attempt == 2:
                        raise
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
