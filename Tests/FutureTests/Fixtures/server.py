"""A small HTTP server on 127.0.0.1 for the network tests: any free port, printed on the first
line of standard output. Stops when its standard input closes (when the test process ends).

  /artist  the iTunes lookup fixture, as JSON
  /slow    answers only after 10 minutes, and counts the clients that close the connection first
  /flaky   fails with 503 twice, then answers as /artist; counts its requests
  /lookup  the iTunes lookup API, for the itunes-lookup app: /lookup?id=<id> answers
             909253  the fixture, as /artist (its rock artist is The Loud Ones)
             1       a malformed body, not JSON
             2       as /slow: only after 10 minutes, counting the clients that close first
             4       fails with 503 on two requests of every three, then answers as 909253
             9       only after 10 minutes, as /slow, counted apart (silentOpened, silentClosed)
             100     a jazz artist alone: no rock artist
             500     fails with 500, counting its requests (lookup500)
             others  valid JSON without results: {"resultCount": 0, "results": []}
           and a missing or empty id fails with 400
  /stats   the counts, as JSON: flaky, slowOpened (requests /slow and the slow lookup got),
           slowClosed (clients of those that closed the connection before the answer),
           flakyLookup, lookup500, silentOpened and silentClosed
"""

import json
import os
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "itunes-lookup.json")
MALFORMED_ID = "1"
SLOW_ID = "2"
counts = {
    "flaky": 0, "slowOpened": 0, "slowClosed": 0,
    "flakyLookup": 0, "lookup500": 0, "silentOpened": 0, "silentClosed": 0,
}
JAZZ_ONLY = json.dumps({"resultCount": 1, "results": [
    {"artistId": 100, "artistName": "Jazz Ensemble", "primaryGenreName": "Jazz"}]}).encode()
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_fixture(self):
        with open(FIXTURE, "rb") as fixture:
            self.send(200, fixture.read())

    def send_slowly(self, opened="slowOpened", closed="slowClosed"):
        """Answers after 10 minutes, unless the client closes the connection first: longer than
        any test waits, so that a close that comes late, on a loaded machine, still counts."""
        with lock:
            counts[opened] += 1
        self.connection.settimeout(0.05)
        for _ in range(12000):  # 10 minutes
            try:
                if self.connection.recv(1) == b"":
                    with lock:
                        counts[closed] += 1
                    return
            except socket.timeout:
                continue
        self.send(200, b"{}")

    def do_GET(self):
        url = urlsplit(self.path)
        if url.path == "/artist":
            self.send_fixture()
        elif url.path == "/flaky":
            with lock:
                counts["flaky"] += 1
                attempt = counts["flaky"]
            if attempt <= 2:
                self.send(503, b'{"error": "try again"}')
            else:
                self.send_fixture()
        elif url.path == "/slow":
            self.send_slowly()
        elif url.path == "/lookup":
            artist_id = parse_qs(url.query).get("id", [""])[0]
            if artist_id == "909253":
                self.send_fixture()
            elif artist_id == MALFORMED_ID:
                self.send(200, b"<html>Service temporarily unavailable</html>", "text/html")
            elif artist_id == SLOW_ID:
                self.send_slowly()
            elif artist_id == "4":
                with lock:
                    counts["flakyLookup"] += 1
                    attempt = counts["flakyLookup"]
                if attempt % 3:
                    self.send(503, b'{"error": "try again"}')
                else:
                    self.send_fixture()
            elif artist_id == "9":
                self.send_slowly("silentOpened", "silentClosed")
            elif artist_id == "100":
                self.send(200, JAZZ_ONLY)
            elif artist_id == "500":
                with lock:
                    counts["lookup500"] += 1
                self.send(500, b'{"error": "internal"}')
            elif artist_id:
                self.send(200, b'{"resultCount": 0, "results": []}')
            else:
                self.send(400, b'{"errorMessage": "Invalid value(s) for key(s): [id]"}')
        elif url.path == "/stats":
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
