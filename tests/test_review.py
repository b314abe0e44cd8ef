"""`fic review` without a browser: blindness, order, atomic saves, resume, agreement, and what the server refuses."""

from __future__ import annotations

import http.client
import json
import threading

import pytest

from fic.eval.review import server as review_server
from fic.eval.review.store import ReviewError, ReviewStore
from fic.metrics import cohen_kappa

JUDGE = [("genuine_followup", True), ("genuine_followup", True), ("meta_planning", False),
         ("degenerate_short", False), ("judge_error", None)]  # fmt: skip


def write_samples(directory, n=5):
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "samples.jsonl", "w") as f:
        for i in range(n):
            label, genuine = JUDGE[i % len(JUDGE)]
            f.write(json.dumps({
                "dataset": "hidden-dataset", "item_id": f"hidden-item-{i}", "temperature": 1.0,
                "perturbation": "none", "sample": i // len(JUDGE), "model": "hidden-model",
                "messages": [{"role": "user", "content": f"question {i}"},
                             {"role": "assistant", "content": f"answer {i}"}],
                "user_turn": f"follow-up {i}", "label": label, "genuine": genuine, "rationale": "hidden-rationale",
            }) + "\n")  # fmt: skip
    return directory


def key_of(store, item_id):
    return next(k for k, row in store.rows.items() if row["item_id"] == item_id)


def test_items_are_blind(tmp_path):
    store = ReviewStore(write_samples(tmp_path), seed=1)
    item = store.item(0)
    assert set(item) == {"id", "index", "total", "messages", "user_turn", "annotation"}
    blob = json.dumps([store.item(i) for i in range(len(store.order))] + [store.state()])
    for hidden in ("hidden-dataset", "hidden-item", "hidden-model", "hidden-rationale", '"temperature"'):
        assert hidden not in blob
    assert all(len(store.item(i)["id"]) == 16 for i in range(len(store.order)))


def test_order_is_shuffled_and_kept_across_sessions(tmp_path):
    write_samples(tmp_path, n=30)
    first = ReviewStore(tmp_path)
    turns = lambda s: [s.item(i)["user_turn"] for i in range(len(s.order))]  # noqa: E731
    assert turns(first) != [f"follow-up {i}" for i in range(30)]  # not the file order
    assert sorted(turns(first)) == sorted(f"follow-up {i}" for i in range(30))
    assert turns(ReviewStore(tmp_path)) == turns(first)  # the seed is kept in DIR/review/order.json
    assert turns(ReviewStore(tmp_path, seed=12345)) != turns(first)


def test_annotations_are_saved_atomically_and_resume(tmp_path):
    store = ReviewStore(write_samples(tmp_path), annotator="ann", seed=0)
    state = store.state()
    assert (state["done"], state["next"], len(state["labels"])) == (0, 0, 7)
    first, second = store.order[0], store.order[1]
    result = store.annotate(first, "meta_planning", False)
    # the estimate is withheld until every item is labelled
    assert result == {"ok": True, "done": 1, "next": 1, "estimate": None, "pooled": False}
    saved = json.loads((tmp_path / "review" / "annotations.json").read_text())
    assert saved[first]["label"] == "meta_planning" and saved[first]["genuine"] is False
    assert saved[first]["annotator"] == "ann" and saved[first]["reader"] == "r1"
    assert not list((tmp_path / "review").glob("*.tmp"))
    # a new session (a reload, a restarted server) resumes after what is saved
    again = ReviewStore(tmp_path)
    assert again.state()["next"] == 1 and again.state()["done"] == 1
    assert again.item(0)["annotation"] == {"label": "meta_planning", "genuine": False, "context_free": False}
    again.annotate(second, "genuine_followup", True)
    human = [json.loads(line) for line in (tmp_path / "review" / "human_labels.jsonl").read_text().splitlines()]
    assert [h["label"] for h in human] == ["meta_planning", "genuine_followup"]
    assert {"dataset", "item_id", "temperature", "perturbation", "sample"} <= set(human[0])  # judge-file format


def test_bad_annotations_are_refused(tmp_path):
    store = ReviewStore(write_samples(tmp_path), seed=0)
    key = store.order[0]
    with pytest.raises(ReviewError, match="not a follow-up label; valid"):
        store.annotate(key, "great", True)
    with pytest.raises(ReviewError, match="genuine must be true or false"):
        store.annotate(key, "genuine_followup", "yes")
    with pytest.raises(ReviewError, match="not an item of this review"):
        store.annotate("0" * 16, "genuine_followup", True)
    with pytest.raises(ReviewError, match="not an item"):
        store.annotate(["list"], "genuine_followup", True)
    assert store.annotations == {}


def test_agreement_kappa_matches_hand_computation(tmp_path):
    store = ReviewStore(write_samples(tmp_path), seed=0)
    human = {"hidden-item-0": ("genuine_followup", True), "hidden-item-1": ("meta_planning", False),
             "hidden-item-2": ("meta_planning", False), "hidden-item-3": ("meta_planning", False),
             "hidden-item-4": ("genuine_followup", True)}  # fmt: skip
    for item_id, (label, genuine) in human.items():
        store.annotate(key_of(store, item_id), label, genuine)
    a = store.agreement()
    # item 4 is a judge_error: excluded. Binary: human T F F F vs judge T T F F -> p_o 3/4, p_e 1/2, kappa 0.5.
    assert (a["annotated"], a["n"], a["excluded"]) == (5, 4, 1)
    assert a["binary"]["kappa"] == pytest.approx(0.5)
    assert a["binary"]["agreement"] == pytest.approx(0.75)
    h = ["genuine_followup", "meta_planning", "meta_planning", "meta_planning"]
    j = ["genuine_followup", "genuine_followup", "meta_planning", "degenerate_short"]
    assert a["label"]["kappa"] == pytest.approx(cohen_kappa(h, j))
    assert a["label"]["agreement"] == pytest.approx(0.5)
    assert a["confusion"]["meta_planning"] == {"genuine_followup": 1, "meta_planning": 1, "degenerate_short": 1}


def test_missing_or_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ReviewError, match="samples.jsonl.*fic probe"):
        ReviewStore(tmp_path)
    (tmp_path / "samples.jsonl").write_text(json.dumps({"dataset": "x"}) + "\n")
    with pytest.raises(ReviewError, match="line 1: needs `messages`"):
        ReviewStore(tmp_path)
    assert review_server.run(_args(tmp_path / "nope")) == 2


def _args(directory, **kw):
    import argparse

    parser = argparse.ArgumentParser()
    review_server.add_arguments(parser)
    return parser.parse_args([str(directory), *[x for k, v in kw.items() for x in (f"--{k}", str(v))]])


@pytest.fixture
def live(tmp_path):
    write_samples(tmp_path)
    srv = review_server.make_server(tmp_path, port=0, seed=0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv, srv.server_address[1], tmp_path
    srv.shutdown()
    srv.server_close()


def request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)  # the path goes out verbatim
    headers = {"Host": f"127.0.0.1:{port}", **(headers or {})}
    data = json.dumps(body).encode() if body is not None else b""
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    headers["Content-Length"] = str(len(data))
    for k, v in headers.items():
        if v is not None:
            conn.putheader(k, v)
    conn.endheaders(data)
    response = conn.getresponse()
    out = response.status, dict(response.getheaders()), response.read()
    conn.close()
    return out


def test_defaults_bind_to_localhost():
    assert _args("d").host == "127.0.0.1"
    import inspect

    assert inspect.signature(review_server.make_server).parameters["host"].default == "127.0.0.1"


def test_server_binds_loopback_and_serves_its_pages(live):
    srv, port, _ = live
    assert srv.server_address[0] == "127.0.0.1"
    status, headers, body = request(port, "GET", "/")
    assert status == 200 and b"/static/app.js" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    for path in ("/static/app.js", "/static/agreement.js", "/static/style.css", "/agreement"):
        assert request(port, "GET", path)[0] == 200


@pytest.mark.parametrize("path", [
    "/../server.py", "/static/../server.py", "/static/../../store.py", "/static/%2e%2e/server.py",
    "/static/..%2fserver.py", "/..%2f..%2fetc%2fpasswd", "//etc/passwd", "/etc/passwd", "/static/",
    "/static/app.js/../../server.py", "/static\\..\\server.py", "/samples.jsonl", "/review/annotations.json",
    "/api/../server.py",
])  # fmt: skip
def test_path_traversal_serves_nothing(live, path):
    _, port, _ = live
    status, _, body = request(port, "GET", path)
    assert status == 404
    assert b"import" not in body and b"root:" not in body and b"follow-up" not in body


def test_api_roundtrip_and_refusals(live):
    srv, port, directory = live
    status, _, body = request(port, "GET", "/api/item?i=0")
    item = json.loads(body)
    assert status == 200 and item["index"] == 0
    good = {"id": item["id"], "label": "new_task_prompt", "genuine": False}
    assert request(port, "POST", "/api/annotate", good, {"Origin": "http://evil.example"})[0] == 403
    assert request(port, "POST", "/api/annotate", good, {"Content-Type": "text/plain"})[0] == 415
    assert request(port, "GET", "/api/state", headers={"Host": f"rebind.example:{port}"})[0] == 421
    status, _, body = request(port, "POST", "/api/annotate", {**good, "label": "nope"})
    assert status == 400 and b"valid" in body
    assert request(port, "GET", "/api/item?i=99")[0] == 400
    assert request(port, "GET", "/api/item?i=x")[0] == 400
    assert not (directory / "review" / "annotations.json").exists()  # nothing refused was saved
    status, _, body = request(port, "POST", "/api/annotate", good, {"Origin": f"http://127.0.0.1:{port}"})
    assert status == 200 and json.loads(body)["done"] == 1
    assert json.loads(request(port, "GET", "/api/item?i=0")[2])["annotation"] == {
        "label": "new_task_prompt", "genuine": False, "context_free": False}  # fmt: skip
    early = json.loads(request(port, "GET", "/api/agreement")[2])  # 1 of 5: nothing from the judge yet
    assert early["annotated"] == 1 and "withheld" in early and "kappa" not in json.dumps(early)
    assert request(port, "DELETE", "/api/annotate")[0] == 405


def test_static_files_are_shipped():
    for name, _ in review_server.ROUTES.values():
        assert (review_server.STATIC_DIR / name).is_file(), name
    for name in ("app.js", "agreement.js"):
        source = (review_server.STATIC_DIR / name).read_text()
        assert ".innerHTML" not in source and "insertAdjacentHTML" not in source and "eval(" not in source
