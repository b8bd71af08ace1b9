#!/usr/bin/env python3
"""An HTTP endpoint for `echomq work --processor http:URL`, standard library only.

    python3 examples/handlers/http_handler.py 8787 &
    echomq work mail --processor http:http://127.0.0.1:8787/jobs

Each job arrives as a POST whose body is the JSON job (docs/processors.md).
A plain 2xx JSON body is the job's return value; this endpoint answers with
`application/x-ndjson` instead, streaming a log line and progress while it
works, then the completed (or failed) line. A 4xx fails the job for good, a
5xx is retried. The port is the first argument (0: any free port); the first
line printed is `listening on HOST:PORT`. With `--tls CERT KEY` (PEM files) it
serves HTTPS; give the worker the CA with --http-ca-file when it is private.
"""
import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Jobs(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection serves many jobs

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        try:
            job = json.loads(self.rfile.read(length))
        except ValueError:
            return self.plain(400, {"error": "the body is not JSON"})
        if not isinstance(job, dict) or "data" not in job:
            return self.plain(400, {"error": "not a job"})
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.line({"type": "log", "line": f"job {job['id']} attempt {job['attempt']} over HTTP"})
        self.line({"type": "progress", "value": 50})
        data = job["data"]
        if isinstance(data, dict) and "fail" in data:
            self.line({"type": "failed", "error": str(data["fail"])})
        else:
            self.line({"type": "completed", "value": {"handled": job["name"], "echo": data}})
        self.wfile.write(b"0\r\n\r\n")

    def line(self, message):
        # One chunk per line, so each arrives while the job runs.
        body = (json.dumps(message) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
        self.wfile.flush()

    def plain(self, status, body):
        text = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, *args):
        pass  # one line per request would drown the output


def main():
    args = sys.argv[1:]
    port = int(args[0]) if args else 8787
    server = ThreadingHTTPServer(("127.0.0.1", port), Jobs)
    if "--tls" in args:
        cert, key = args[args.index("--tls") + 1 : args.index("--tls") + 3]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    host, port = server.server_address[:2]
    print(f"listening on {host}:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
