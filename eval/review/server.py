"""`fic review DIR [DIR ...] [--sample N] [--readers K --reader R]`: a blind manual-review web app to validate a
follow-up judge by hand.

DIR holds the `samples.jsonl` that `fic probe` writes (`--sample N`: a random sample of N of its turns, stratified
by dataset and temperature, whose labels `fic rates DIR` turns into the calibrated estimate). The annotator sees one
context and its generated user turn at a time, in a shuffled order, with no model name, folder, dataset or anything
the judge wrote; picks the primary label and the binary genuine decision (and, for a genuine one, whether the request
is context-free: it would fit after any answer); and each annotation is saved at once (atomically). Reloading resumes where the annotator stopped. `/agreement` reports Cohen's kappa between the human and
the judge once every item of the session is labelled (not before: it would tell the judge's verdicts).

Several folders (one per model, say) make one blind session: their drawn turns are pooled and dealt to `--readers K`
readers (`r1` ... `rK`, or names separated by commas), each model's turns evenly (to within one turn per reader);
each reader starts their own session with `--reader R` (on their own `--port`) and sees only their share, the models
interleaved in a seeded random order. Each label still lands in its own folder (`DIR/labels.jsonl`, with `reader`
and `annotator`), so `fic rates DIR` works as for a folder labelled alone. `--foil-share S` mixes into the session,
unmarked, S of each folder's turns as foils (a turn of the model shown after another item's conversation), whose
labels give the readers' generic floor (`DIR/foil_labels.jsonl`, read by `fic rates DIR`). See
`fic.eval.review.store` and `fic.eval.review.foils`.

Security. The server binds to 127.0.0.1 unless `--host` says otherwise. It serves a fixed list of its own static
files and a small JSON API, nothing from the filesystem by request path, so no path can reach another file.
Requests whose Host header is not this server's loopback address are refused (DNS rebinding), as are POSTs from
another origin or without a JSON body (cross-site requests). Pages carry a Content-Security-Policy that allows only
the app's own script, and the script writes model text with `textContent`, never as HTML.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import socket
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from .store import ReviewError, ReviewStore

logger = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
# URL path -> (file in STATIC_DIR, content type). Nothing else is ever read from disk.
ROUTES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/agreement": ("agreement.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/agreement.js": ("agreement.js", "text/javascript; charset=utf-8"),
    "/static/style.css": ("style.css", "text/css; charset=utf-8"),
}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")  # fmt: skip
MAX_BODY = 64 * 1024


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ReviewHandler(BaseHTTPRequestHandler):
    server_version = "fic-review"
    sys_version = ""
    store: ReviewStore  # set on the subclass made by make_server
    allowed_hosts: set[str] | None

    def log_message(self, fmt, *args):  # route the access log through logging, at debug level
        logger.debug("%s " + fmt, self.address_string(), *args)

    # responses ------------------------------------------------------------------------------------------

    def _headers(self, status: int, content_type: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

    def _json(self, obj, status: int = 200) -> None:
        body = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self._headers(status, "application/json; charset=utf-8", len(body))
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._json({"error": message}, status)

    def _host_ok(self) -> bool:
        if self.allowed_hosts is None:
            return True
        host = (self.headers.get("Host") or "").lower()
        if host in self.allowed_hosts:
            return True
        self._error(HTTPStatus.MISDIRECTED_REQUEST, "unexpected Host header")
        return False

    # routes ---------------------------------------------------------------------------------------------

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if not self._host_ok():
            return
        url = urlsplit(self.path)
        if url.path in ROUTES:
            name, content_type = ROUTES[url.path]
            body = (STATIC_DIR / name).read_bytes()
            self._headers(200, content_type, len(body))
            self.wfile.write(body)
            return
        query = parse_qs(url.query)
        try:
            if url.path == "/api/state":
                return self._json(self.store.state())
            if url.path == "/api/item":
                raw = query.get("i", ["0"])[0]
                if not raw.lstrip("-").isdigit():
                    raise ReviewError(f"i={raw!r} is not an item index")
                return self._json(self.store.item(int(raw)))
            if url.path == "/api/agreement":
                return self._json(self.store.agreement())
        except ReviewError as err:
            return self._error(400, str(err))
        self._error(404, "not found")

    def do_POST(self):  # noqa: N802
        if not self._host_ok():
            return
        origin = self.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc.lower() != (self.headers.get("Host") or "").lower():
            return self._error(403, "cross-origin request refused")
        if urlsplit(self.path).path != "/api/annotate":
            return self._error(404, "not found")
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            return self._error(415, "send the annotation as application/json")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            return self._error(413 if length > MAX_BODY else 400, "bad request body length")
        try:
            body = json.loads(self.rfile.read(length))
            if not isinstance(body, dict):
                raise ReviewError("the body must be a JSON object {id, label, genuine[, context_free]}")
            result = self.store.annotate(body.get("id"), body.get("label"), body.get("genuine"),
                                         body.get("context_free"))  # fmt: skip
        except (ValueError, ReviewError) as err:
            return self._error(400, str(err))
        self._json(result)

    def do_PUT(self):  # noqa: N802
        self._error(405, "method not allowed")

    do_DELETE = do_PATCH = do_PUT


def make_server(directory: str | Path | list, host: str = "127.0.0.1", port: int = 8765, annotator: str | None = None,
                seed: int | None = None, sample: int | None = None, readers: int | str | list | None = None,
                reader: str | None = None, foil_share: float | None = None) -> ThreadingHTTPServer:  # fmt: skip
    """A ready (not yet serving) review server for one folder or a list of them (`ReviewStore`'s arguments);
    `port=0` picks a free port."""
    store = ReviewStore(directory, annotator=annotator, seed=seed, sample=sample, readers=readers, reader=reader,
                        foil_share=foil_share)  # fmt: skip
    handler = type("BoundReviewHandler", (ReviewHandler,), {"store": store, "allowed_hosts": None})
    server_class = ThreadingHTTPServer
    if ":" in host:  # an IPv6 address
        server_class = type("ThreadingHTTPServerV6", (ThreadingHTTPServer,), {"address_family": socket.AF_INET6})
    server = server_class((host, port), handler)
    server.daemon_threads = True
    if is_loopback(host):
        bound = server.server_address[1]
        handler.allowed_hosts = {f"{h}:{bound}" for h in ("127.0.0.1", "localhost", "[::1]")}
    return server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", nargs="+",
                        help="a `fic probe` output folder (holds samples.jsonl); several: one blind session over all "
                        "of them, each label saved in its own folder")  # fmt: skip
    parser.add_argument("--port", type=int, default=8765, help="port (0: any free port)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind; the default keeps the app on this machine")  # fmt: skip
    parser.add_argument("--annotator", help="who labels: stored with each label (default: the reader id)")
    parser.add_argument("--seed", type=int, help="draw and shuffle seed (default: drawn once and kept in DIR/review)")
    parser.add_argument("--sample", type=int, metavar="N",
                        help="label N turns of each DIR drawn at random, stratified by dataset and temperature; the "
                        "labels go to DIR/labels.jsonl and `fic rates DIR` adds the calibrated estimate (default: "
                        "every turn)")  # fmt: skip
    parser.add_argument("--readers", metavar="K|NAMES",
                        help="share the turns among K readers (r1 ... rK) or the named ones (comma-separated): each "
                        "gets an equal share of every DIR's turns, disjoint from the others' (default: the saved "
                        "plan's, else one reader)")  # fmt: skip
    parser.add_argument(
        "--reader", metavar="R", help="which reader of the plan this session is (needed with more than one reader)"
    )
    parser.add_argument("--foil-share", type=float, metavar="S",
                        help="mix foils into the session, unmarked: turns of each DIR's model shown after another "
                        "item's conversation, S of each DIR's turns (e.g. 0.25: 10 foils beside 30 real turns); "
                        "their labels (DIR/foil_labels.jsonl) give the readers' generic floor in `fic rates DIR` "
                        "(default: the saved plan's, else none)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    directories = args.directory if isinstance(args.directory, list) else [args.directory]
    try:
        server = make_server(directories, args.host, args.port, args.annotator, args.seed, args.sample,
                             args.readers, args.reader, getattr(args, "foil_share", None))  # fmt: skip
    except (ReviewError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    if not is_loopback(args.host):
        logger.warning("serving on %s: anyone who can reach it can read the samples and write annotations", host)
    shown = f"[{host}]" if ":" in host else host
    store = server.RequestHandlerClass.store
    what = directories[0] if len(directories) == 1 else f"{len(directories)} folders"
    if len(store.readers) > 1:
        what += f", reader {store.reader} of {len(store.readers)} ({len(store.order)} turns)"
    print(f"fic review: {what} at http://{shown}:{port}/ (agreement: /agreement); Ctrl-C to stop")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
