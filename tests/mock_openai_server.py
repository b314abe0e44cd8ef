"""A small local OpenAI-compatible server for tests: `/v1/completions` and `/v1/chat/completions`.

It runs on 127.0.0.1 with an ephemeral port in a background thread (stdlib `ThreadingHTTPServer`), answers with
canned or computed replies, records every request, counts requests in flight, and injects faults on demand:

    with MockOpenAIServer(completion_reply=lambda body, j: f"sample {j}") as server:
        server.add_faults("429", "500", "timeout", "truncated", "nonjson")   # the next five requests fail, in order
        backend = OpenAICompletionsBackend(server.url, model="m", timeout=0.5, backoff_base=0.01)
        ...
        server.requests        # [{"path", "body", "headers"}, ...] in arrival order
        server.max_in_flight   # most requests handled at the same time

A concurrency bound is checked without timing: `MockOpenAIServer(gate=3)` holds the first requests until 3 are in
flight at once (then lets every request through), so a client allowed 3 at a time reaches exactly 3 however slow the
machine, one allowed 2 never opens the gate (it gives up after `gate_timeout` seconds) and one allowed more than 3
exceeds it. `server.max_in_flight == 3` is then exact, not a guess about overlapping sleeps.

Faults (each consumed by one request, in arrival order; a `Fault` gives full control):
    "429"        429 with an OpenAI-style error body (`Fault(status=429, headers={"Retry-After": "0.1"})` adds one)
    "500"/"503"  server error
    "400"/"404"  client error (not retryable)
    "timeout"    sleeps `timeout_sleep` seconds (longer than the client's timeout), then answers normally
    "truncated"  announces a longer Content-Length than it sends, then closes the connection
    "nonjson"    200 with an HTML body
    "badjson"    200 with JSON that is cut off mid-object
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Fault:
    """One injected failure. `status`/`body`/`headers` make the reply; `sleep` delays it; `kind` picks a special."""

    status: int = 500
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    sleep: float = 0.0
    kind: str = "status"  # "status" | "timeout" | "truncated" | "nonjson" | "badjson"


def _fault(spec: str | Fault) -> Fault:
    if isinstance(spec, Fault):
        return spec
    if spec.isdigit():
        return Fault(status=int(spec))
    if spec in ("timeout", "truncated", "nonjson", "badjson"):
        return Fault(kind=spec)
    raise ValueError(f"unknown fault {spec!r}; use an HTTP status, timeout, truncated, nonjson, badjson or a Fault")


def default_completion_reply(body: dict, j: int) -> str:
    """`<last 12 chars of the prompt>|<sample index>`: distinct per prompt and per sample."""
    return f"{body.get('prompt', '')[-12:]}|{j}"


def default_chat_reply(body: dict) -> str:
    return "ok"


class MockOpenAIServer:
    """
    Args:
        completion_reply: `(request_body, sample_index) -> text` or a fixed string, for `/v1/completions`.
        chat_reply: `request_body -> text` or a fixed string, for `/v1/chat/completions`.
        latency: seconds every request sleeps before answering (makes concurrency observable).
        gate: hold requests until this many are in flight at the same time, once (0: no gate); see above.
        gate_timeout: the most seconds a request waits at the gate, which then opens for good.
        timeout_sleep: how long a "timeout" fault sleeps.
        honour_stop: cut completion texts at the request's `stop` strings, as real servers do.
        model_id, max_model_len: the served model's name and context length in its card (`GET /v1/models`, as vLLM's); a completion request whose
            prompt words plus `max_tokens` exceed it is refused with 400, as vLLM refuses one past its context.

    Like a vLLM server, it refuses `n > 1` at temperature 0 with 400 ("n must be 1 when using greedy sampling").
    """

    def __init__(
        self,
        completion_reply: str | Callable[[dict, int], str] = default_completion_reply,
        chat_reply: str | Callable[[dict], str] = default_chat_reply,
        latency: float = 0.0,
        timeout_sleep: float = 2.0,
        honour_stop: bool = True,
        max_model_len: int = 4096,
        model_id: str = "mock-model",
        gate: int = 0,
        gate_timeout: float = 30.0,
    ):
        self.completion_reply, self.chat_reply = completion_reply, chat_reply
        self.max_model_len, self.model_id = max_model_len, model_id
        self.latency, self.timeout_sleep, self.honour_stop = latency, timeout_sleep, honour_stop
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self.gate, self.gate_timeout = gate, gate_timeout
        self._gate = threading.Condition(self._lock)
        self._gate_open = gate <= 1
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The API root, `http://127.0.0.1:PORT/v1` (what clients take as `base_url`)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def add_faults(self, *faults: str | Fault) -> None:
        with self._lock:
            self._faults.extend(_fault(f) for f in faults)

    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    def start(self) -> MockOpenAIServer:
        server = self

        class Handler(_Handler):
            mock = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # sleeping "timeout" handlers must not hold up stop()
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    def __enter__(self) -> MockOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _take_fault(self) -> Fault | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def _reply(self, path: str, body: dict) -> tuple[int, dict]:
        if path.endswith("/chat/completions"):
            text = self.chat_reply if isinstance(self.chat_reply, str) else self.chat_reply(body)
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            return 200, {"id": "chatcmpl-mock", "object": "chat.completion", "model": body.get("model"),
                         "choices": [choice]}  # fmt: skip
        if path.endswith("/completions"):
            if not isinstance(body.get("prompt"), (str, list)):
                return 400, {"error": {"message": "'prompt' is required", "type": "invalid_request_error"}}
            if body.get("temperature", 1.0) == 0 and int(body.get("n", 1)) > 1:
                return 400, {"error": {"message": f"n must be 1 when using greedy sampling, got {body['n']}.",
                                       "type": "BadRequestError"}}  # fmt: skip
            length = len(str(body["prompt"]).split()) + int(body.get("max_tokens") or 16)
            if length > self.max_model_len:
                return 400, {"error": {"message": f"This model's maximum context length is {self.max_model_len} "
                                       f"tokens. However, you requested {length} tokens.", "type": "BadRequestError"}}  # fmt: skip
            choices = []
            for j in range(int(body.get("n", 1))):
                text = (
                    self.completion_reply if isinstance(self.completion_reply, str) else self.completion_reply(body, j)
                )
                stop = body.get("stop") or []
                if self.honour_stop:
                    for s in [stop] if isinstance(stop, str) else stop:
                        text = text.split(s, 1)[0]
                choices.append({"index": j, "text": text, "finish_reason": "stop"})
            return 200, {
                "id": "cmpl-mock",
                "object": "text_completion",
                "model": body.get("model"),
                "choices": choices,
            }
        return 404, {"error": {"message": f"no route {path}", "type": "not_found"}}


class _Handler(BaseHTTPRequestHandler):
    mock: MockOpenAIServer

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/v1/models"):
            card = {
                "id": self.mock.model_id,
                "object": "model",
                "owned_by": "mock",
                "max_model_len": self.mock.max_model_len,
            }
            self._send(200, json.dumps({"object": "list", "data": [card]}).encode())
        else:
            self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _leave(self) -> None:
        """The request is no longer in flight. Called before the first byte of the answer: once the client has it,
        it may send its next request, which must not find this one still counted (max_in_flight would overcount)."""
        if getattr(self, "_counted", False):
            self._counted = False
            with self.mock._lock:
                self.mock.in_flight -= 1

    def _send(self, status: int, payload: bytes, content_type: str = "application/json", headers=None, length=None):
        self._leave()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload) if length is None else length))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def do_POST(self) -> None:
        mock = self.mock
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        with mock._lock:
            mock.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
            mock.in_flight += 1
            mock.max_in_flight = max(mock.max_in_flight, mock.in_flight)
            if not mock._gate_open:
                if mock.in_flight < mock.gate:  # wait for the others (the lock is released while waiting)
                    mock._gate.wait_for(lambda: mock._gate_open, timeout=mock.gate_timeout)
                mock._gate_open = True
                mock._gate.notify_all()
        self._counted = True
        try:
            fault = mock._take_fault()
            time.sleep(mock.latency + (fault.sleep if fault else 0.0))
            if fault is not None and fault.kind == "timeout":
                time.sleep(mock.timeout_sleep)
            elif fault is not None and fault.kind == "truncated":
                status, reply = mock._reply(self.path, body)
                data = json.dumps(reply).encode()
                self._send(200, data[: len(data) // 2], length=len(data))
                self.close_connection = True
                return
            elif fault is not None and fault.kind == "nonjson":
                self._send(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
                return
            elif fault is not None and fault.kind == "badjson":
                self._send(200, b'{"choices": [{"index": 0, "text": "cut')
                return
            elif fault is not None:
                message = fault.body or json.dumps(
                    {"error": {"message": f"injected {fault.status}", "code": fault.status}}
                )
                self._send(fault.status, message.encode(), headers=fault.headers)
                return
            status, reply = mock._reply(self.path, body)
            self._send(status, json.dumps(reply).encode())
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test); nothing to answer
            pass
        finally:
            self._leave()
