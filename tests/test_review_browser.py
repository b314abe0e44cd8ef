"""`fic review` end to end in headless Chromium (Debian's package; `scripts/install_browser.sh` installs it).

Chromium is driven over the DevTools protocol through `--remote-debugging-pipe` (file descriptors 3 and 4, one JSON
message per NUL-terminated frame), so the test needs no Python package beyond the standard library. A JavaScript
dialog (`alert`) opening at any point means injected model text ran as code; the test fails on it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from fic.eval.report import probe_report
from fic.eval.review.server import make_server

pytestmark = pytest.mark.browser

XSS_IMG = "<img src=x onerror=alert(1)>"
XSS_SCRIPT = "<script>alert(2)</script>"
XSS_LINK = '<a href="javascript:alert(3)">click</a>'
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-pipe"]  # fmt: skip


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser"), shutil.which("google-chrome")):  # fmt: skip
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


class Browser:
    """A minimal DevTools-protocol client over Chromium's debugging pipe, attached to one page."""

    def __init__(self, binary: str, user_data_dir: str):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def wire_fds():  # in the child: Chromium reads commands on fd 3 and writes replies on fd 4
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=wire_fds, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._replies: dict[int, dict] = {}
        self.events: list[dict] = []
        self.dialogs: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True, session=False)[
            "sessionId"
        ]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                message = json.loads(raw)
                if message.get("method") == "Page.javascriptDialogOpening":
                    self.dialogs.append(message["params"].get("message", ""))
                    self._send({"id": -1, "method": "Page.handleJavaScriptDialog", "params": {"accept": False},
                                "sessionId": message.get("sessionId")})  # fmt: skip
                with self._cond:
                    if "id" in message:
                        self._replies[message["id"]] = message
                    else:
                        self.events.append(message)
                    self._cond.notify_all()

    def _send(self, message: dict) -> None:
        os.write(self._w, json.dumps(message).encode() + b"\0")

    def call(self, method: str, session: bool = True, timeout: float = 30.0, **params) -> dict:
        with self._cond:
            self._next_id += 1
            msg_id = self._next_id
        message = {"id": msg_id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.time() + timeout
        with self._cond:
            while msg_id not in self._replies:
                left = deadline - time.time()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"no reply to {method} (chromium exit code {self.proc.poll()})")
                self._cond.wait(left)
            reply = self._replies.pop(msg_id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Load `url` as a new document (going through about:blank, so a hash-only change also reloads)."""
        self.call("Page.navigate", url="about:blank")
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete'")

    def wait(self, expression: str, timeout: float = 20.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"waited {timeout} s for: {expression}")

    def close(self):
        try:
            self.call("Browser.close", session=False, timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture(scope="module")
def browser():
    binary = chromium_path()
    if binary is None:
        pytest.skip("Chromium is not installed; run scripts/install_browser.sh (Debian's chromium package)")
    with tempfile.TemporaryDirectory() as user_data_dir:
        b = Browser(binary, user_data_dir)
        try:
            yield b
        finally:
            b.close()


def write_samples(directory: Path) -> list[dict]:
    rows = []
    for i in range(4):
        hostile = i == 2
        rows.append({
            "dataset": "secret-dataset", "item_id": f"item-{i}", "temperature": 0.7, "perturbation": "none",
            "sample": 0, "model": "secret-model-name",
            "messages": [
                {"role": "user", "content": f"Question {i}: how do I store eggs? {XSS_SCRIPT if hostile else ''}"},
                {"role": "assistant", "content": f"Answer {i}: keep them cold. {XSS_LINK if hostile else ''}"},
            ],
            "user_turn": f"{XSS_IMG} and {XSS_SCRIPT}" if hostile else f"What about duck eggs, number {i}?",
            "label": "genuine_followup" if i % 2 == 0 else "meta_planning",
            "genuine": i % 2 == 0, "rationale": "judge-rationale-text", "judge": "heuristic",
        })  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "samples.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return rows


@pytest.fixture
def review_server(tmp_path):
    write_samples(tmp_path)
    server = make_server(tmp_path, "127.0.0.1", 0, annotator="tester", seed=3)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}", tmp_path
    finally:
        server.shutdown()
        server.server_close()


def test_review_annotate_reload_and_inert_text(browser, review_server):
    server, base, directory = review_server
    store = server.RequestHandlerClass.store
    hostile = next(i for i, key in enumerate(store.order) if XSS_IMG in store.rows[key]["user_turn"])

    # page load: the hostile item, shown as text
    browser.open(f"{base}/#i={hostile}")
    browser.wait("document.getElementById('user-turn').textContent.length > 0")
    assert browser.js("document.getElementById('user-turn').textContent") == f"{XSS_IMG} and {XSS_SCRIPT}"
    assert browser.js("document.querySelectorAll('main img, main script, main a').length") == 0
    context = browser.js("document.getElementById('context').textContent")
    assert XSS_SCRIPT in context and XSS_LINK in context
    assert browser.js("document.getElementById('position').textContent") == f"item {hostile + 1} of 4"
    # blind: no model, dataset, item id or judge output anywhere on the page
    page_text = browser.js("document.documentElement.outerHTML")
    for hidden in ("secret-model-name", "secret-dataset", "item-2", "judge-rationale-text"):
        assert hidden not in page_text
    assert browser.js("document.querySelectorAll('#labels input[name=label]').length") == 7

    # one annotation through the form
    browser.js("document.getElementById('label-meta_planning').click()")
    assert browser.js("document.getElementById('genuine-no').checked") is True  # follows the label by default
    assert browser.js("document.getElementById('save').disabled") is False
    browser.js("document.getElementById('save').click()")
    browser.wait("document.getElementById('progress').textContent === '1 / 4 annotated'")
    saved = json.loads((directory / "review" / "annotations.json").read_text())
    assert list(saved.values()) == [
        {
            "label": "meta_planning",
            "genuine": False,
            "context_free": False,
            "annotator": "tester",
            "reader": "r1",
            "time": list(saved.values())[0]["time"],
        }
    ]
    assert list(saved) == [store.order[hostile]]

    # a reload shows it saved
    browser.open(f"{base}/#i={hostile}")
    browser.wait("document.getElementById('status').textContent === 'saved'")
    assert browser.js("document.getElementById('label-meta_planning').checked") is True
    assert browser.js("document.getElementById('genuine-no').checked") is True
    assert browser.js("document.getElementById('progress').textContent") == "1 / 4 annotated"

    # a plain reload resumes at the first item not yet annotated
    browser.open(f"{base}/")
    first_todo = next(i for i, key in enumerate(store.order) if key not in saved)
    browser.wait(f"document.getElementById('position').textContent === 'item {first_todo + 1} of 4'")

    # the agreement page withholds the kappa until the last label (it would tell the judge's verdicts)
    browser.open(f"{base}/agreement")
    browser.wait("document.getElementById('summary').textContent.includes('withheld')")
    assert "1 of 4 items annotated" in browser.js("document.getElementById('summary').textContent")
    assert browser.js("document.getElementById('kappa').hidden") is True
    assert browser.js("document.querySelectorAll('#kappa tbody tr').length") == 0
    for key in store.order:  # the rest labelled: now it reports the kappa rows
        if key not in saved:
            store.annotate(key, "new_task_prompt", False)
    browser.open(f"{base}/agreement")
    browser.wait("document.querySelectorAll('#kappa tbody tr').length === 2")
    assert "4 of 4 items annotated" in browser.js("document.getElementById('summary').textContent")
    assert browser.dialogs == [], f"model text ran as script: {browser.dialogs}"


def test_probe_report_is_inert_in_the_browser(browser, tmp_path):
    rows = write_samples(tmp_path / "probe")
    path = probe_report({}, rows, tmp_path / "probe" / "report.html")
    browser.open(path.resolve().as_uri())
    browser.wait("document.body !== null && document.body.textContent.length > 0")
    assert browser.js("document.querySelectorAll('script, [onerror], iframe, object, embed').length") == 0
    assert browser.js("[...document.querySelectorAll('a')].filter(a => a.protocol === 'javascript:').length") == 0
    assert browser.js("[...document.querySelectorAll('pre')].some(p => p.textContent.includes(" + json.dumps(XSS_IMG)
                      + "))")  # fmt: skip
    assert browser.dialogs == [], f"model text ran as script: {browser.dialogs}"
