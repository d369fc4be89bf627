"""A small HTTP server on 127.0.0.1 for the network tests: any free port, printed on the first
line of standard output. Stops when its standard input closes (when the test process ends).

  /artist  the iTunes lookup fixture, as JSON
  /slow    answers only after 30 s, and counts the clients that close the connection first
  /flaky   fails with 503 twice, then answers as /artist; counts its requests
  /stats   the counts, as JSON
"""

import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "itunes-lookup.json")
counts = {"flaky": 0, "slowClosed": 0}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/artist":
            with open(FIXTURE, "rb") as fixture:
                self.send(200, fixture.read())
        elif self.path == "/flaky":
            with lock:
                counts["flaky"] += 1
                attempt = counts["flaky"]
            if attempt <= 2:
                self.send(503, b'{"error": "try again"}')
            else:
                with open(FIXTURE, "rb") as fixture:
                    self.send(200, fixture.read())
        elif self.path == "/slow":
            self.connection.settimeout(0.05)
            for _ in range(600):  # 30 s
                try:
                    if self.connection.recv(1) == b"":
                        with lock:
                            counts["slowClosed"] += 1
                        return
                except socket.timeout:
                    continue
            self.send(200, b"{}")
        elif self.path == "/stats":
            with lock:
                self.send(200, json.dumps(counts).encode())
        else:
            self.send(404, b"{}")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()  # until the test process closes it
server.shutdown()
