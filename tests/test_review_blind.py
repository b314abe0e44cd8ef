"""`fic review` blind and balanced: nothing the reader can fetch depends on the judge before the last label, several
folders pooled in one session deal each model evenly to disjoint readers, and every label row names its reader."""

from __future__ import annotations

import argparse
import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from test_review import request

from fic.eval.rates import read_labels
from fic.eval.review import server as review_server
from fic.eval.review.store import ReviewError, ReviewStore, parse_readers
from fic.followup_summary import row_key

LABELS = ["genuine_followup", "previous_turn_restate", "new_task_prompt", "meta_planning", "judge_error"]
# A judge's output under marker values, and a second judge that says otherwise on every turn.
JUDGES = {
    "A": lambda i: {"label": LABELS[i % 5], "genuine": [True, False, False, False, None][i % 5],
                    "confidence": 0.9137, "rationale": f"secret-rationale-A{i}", "judge": "secret-judge-A",
                    "generic_genuine": i % 2 == 0},
    "B": lambda i: {"label": LABELS[(i + 2) % 5], "genuine": [False, True, True, None, False][i % 5],
                    "confidence": 0.2468, "rationale": f"secret-rationale-B{i}", "judge": "secret-judge-B",
                    "generic_genuine": i % 3 == 0},
}  # fmt: skip
MARKERS = ("secret-", "0.9137", "0.2468", "generic_genuine", "confidence", "rationale", "secret-model", "folder-")


def write_run(directory: Path, model: str, n: int, judge: str = "A", datasets=("gsm8k", "mt_bench"),
              temperatures=(0.0, 1.0)) -> Path:  # fmt: skip
    """A `fic probe`-like folder: n turns of `model` over datasets x temperatures, judged by `judge`."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        dataset, temperature = datasets[i % len(datasets)], temperatures[(i // len(datasets)) % len(temperatures)]
        rows.append({"model": f"secret-model-{model}", "dataset": dataset, "item_id": f"{i // 2}",
                     "temperature": temperature, "perturbation": "none", "sample": i % 2,
                     "messages": [{"role": "user", "content": f"question {i} of {dataset}"},
                                  {"role": "assistant", "content": f"answer {i}"}],
                     "user_turn": f"turn {i} by {model}", **JUDGES[judge](i)})  # fmt: skip
    (directory / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "probe_meta.json").write_text(json.dumps({"run_id": f"run-{model}"}))
    return directory


def runs(root: Path, judge: str = "A", sizes=(40, 24, 31)) -> list[Path]:
    return [write_run(root / f"folder-{m}", m, n, judge) for m, n in zip("xyz", sizes)]


def serve(directories, **kw):
    srv = review_server.make_server(directories, port=0, **kw)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


def get(port, path):
    status, _, body = request(port, "GET", path)
    assert status == 200, (path, body)
    return body


def walk(directories, labels, **kw) -> tuple[list[bytes], list[bytes]]:
    """Every response a reader can fetch as they label the session's items in order with `labels(i)`: the pages,
    then before each label the state, the agreement and the items (all of them before the first and the last label,
    the neighbours otherwise), and each label's answer; then (after) the last label's answer, state and agreement."""
    srv, port = serve(directories, **kw)
    seen = []
    try:
        for path in ("/", "/index.html", "/agreement", "/static/app.js", "/static/agreement.js", "/static/style.css"):
            seen.append(get(port, path))
        total = json.loads(get(port, "/api/state"))["total"]
        for i in range(total):
            seen += [get(port, "/api/state"), get(port, "/api/agreement")]
            shown = range(total) if i in (0, total - 1) else sorted({0, i - 1, i, min(i + 1, total - 1)})
            seen += [get(port, f"/api/item?i={j}") for j in shown]
            item = json.loads(get(port, f"/api/item?i={i}"))
            label, genuine = labels(i)
            status, _, body = request(port, "POST", "/api/annotate", {"id": item["id"], "label": label,
                                                                      "genuine": genuine})  # fmt: skip
            assert status == 200, body
            seen.append(body)
        after = [seen.pop(), get(port, "/api/state"), get(port, "/api/agreement")]
    finally:
        srv.shutdown()
        srv.server_close()
    return seen, after


def human(i):
    return ("genuine_followup", True) if i % 3 == 0 else ("new_task_prompt", False)


@pytest.mark.parametrize("kw", [{"sample": 12, "seed": 5}, {"sample": 18, "seed": 2, "readers": 2, "reader": "r2"}])
def test_nothing_from_the_judge_reaches_the_reader_before_the_last_label(tmp_path, kw):
    """The same turns judged by two judges that disagree on every one: every page and API answer the reader gets
    before the last label is byte for byte the same, and none carries a judge field or a model or folder name."""
    (before_a, after_a), (before_b, after_b) = (walk(runs(tmp_path / j, j), human, **kw) for j in JUDGES)
    assert before_a == before_b
    for body in before_a:
        text = body.decode()
        assert not any(marker in text for marker in MARKERS), text[:300]
        if text.startswith("{"):
            data = json.loads(text)
            assert data.get("estimate") is None and data.get("estimates") is None
            assert not {"kappa", "confusion", "label", "binary", "n", "excluded"} & set(data)
    # after the last label, and only then: the agreement. No estimate even now: pooled, it would name each folder
    # with its rate (how each model fared) to readers who may read the same models again
    done, agreement_a, agreement_b = json.loads(after_a[0]), json.loads(after_a[2]), json.loads(after_b[2])
    assert done["next"] is None and done["pooled"] and done["estimate"] is None and "estimates" not in done
    assert after_a[:2] == after_b[:2] and not any(marker in after_a[1].decode() for marker in MARKERS)
    assert agreement_a["binary"] is not None and agreement_a["confusion"] != agreement_b["confusion"]


def test_single_folder_blind_too(tmp_path):
    (before_a, after_a), (before_b, after_b) = (walk([write_run(tmp_path / j / "folder-x", "x", 30, j)], human,
                                                     seed=1) for j in JUDGES)  # fmt: skip
    assert before_a == before_b
    assert json.loads(after_a[0])["estimate"] is not None  # the last label's answer carries it
    assert json.loads(after_a[2])["confusion"] != json.loads(after_b[2])["confusion"]


def test_agreement_is_withheld_until_the_last_label(tmp_path):
    store = ReviewStore(write_run(tmp_path / "x", "x", 6), seed=0)
    for i, item_id in enumerate(store.order):
        out = store.agreement()
        assert out == {"annotated": i, "total": 6, "withheld": out["withheld"]} and "withheld until" in out["withheld"]
        store.annotate(item_id, "genuine_followup", True)
    assert store.agreement()["binary"] is not None


def test_sample_order_and_ids_do_not_depend_on_the_judge(tmp_path):
    """The draw is stratified by dataset and temperature only, and shuffled (not grouped by stratum)."""
    a = ReviewStore(runs(tmp_path / "A", "A"), sample=30, seed=3, readers=3, reader="r1")
    b = ReviewStore(runs(tmp_path / "B", "B"), sample=30, seed=3, readers=3, reader="r1")
    assert a.order == b.order and [f.order for f in a.folders] == [f.order for f in b.folders]
    single = ReviewStore(write_run(tmp_path / "s", "s", 60), sample=40, seed=3)
    strata = [(single.rows[k]["dataset"], single.rows[k]["temperature"]) for k in single.order]
    assert strata != sorted(strata)  # the stratum-by-stratum draw is shuffled before it is shown


@pytest.mark.parametrize("n_readers, sample", [(2, 30), (3, 30), (2, None), (4, 7)])
def test_readers_share_each_model_evenly_and_cover_the_sample(tmp_path, n_readers, sample):
    folders = runs(tmp_path)
    stores = [ReviewStore(folders, sample=sample, seed=11, readers=n_readers, reader=f"r{r + 1}")
              for r in range(n_readers)]  # fmt: skip
    drawn = {str(f.directory): len(f.order) for f in stores[0].folders}
    assert drawn == {str(p): min(sample or 10**9, n) for p, n in zip(folders, (40, 24, 31))}
    seen = Counter()
    for store in stores:
        by_model = Counter(store.rows[i]["model"] for i in store.order)
        for folder in store.folders:
            model = next(iter(folder.rows.values()))["model"]
            share = len(folder.order) / n_readers
            assert abs(by_model[model] - share) < 1, (store.reader, model, by_model[model], share)
        seen.update(store.order)
    assert all(count == 1 for count in seen.values())  # disjoint
    assert sum(seen.values()) == sum(drawn.values())  # and together they cover the sample
    totals = [len(s.order) for s in stores]
    assert max(totals) - min(totals) <= 1
    # the same plan whatever order the folders are named in, in every reader's session
    again = ReviewStore(list(reversed(folders)), readers=n_readers, reader="r1")
    assert again.order == stores[0].order


def test_models_are_interleaved_in_a_seeded_order(tmp_path):
    folders = runs(tmp_path)
    store = ReviewStore(folders, sample=30, seed=4, readers=2, reader="r1")
    models = [store.rows[i]["model"] for i in store.order]
    switches = sum(a != b for a, b in zip(models, models[1:]))
    assert len(models) == 42 and switches > 10  # grouped by model, 42 turns of three models would switch twice
    assert ReviewStore(folders, reader="r1").order == store.order  # the plan is kept in each folder
    assert ReviewStore(folders, seed=5, reader="r1").order != store.order


def test_each_model_sample_is_the_one_a_single_folder_review_draws(tmp_path):
    folders = runs(tmp_path)
    pooled = ReviewStore(folders, sample=30, seed=0, readers=2, reader="r1")
    pooled_turns = {str(f.directory): sorted(f.rows[k]["user_turn"] for k in f.order) for f in pooled.folders}
    for path in folders:
        alone = ReviewStore(path, sample=30, seed=0, readers=1)
        assert sorted(alone.rows[k]["user_turn"] for k in alone.order) == pooled_turns[str(path)]


def test_labels_land_in_their_folder_with_reader_and_annotator(tmp_path):
    folders = runs(tmp_path, sizes=(10, 8, 6))
    # both readers' sessions open at once, saving in turn to the same folders
    one = ReviewStore(folders, seed=1, readers="d1,d2", reader="d1", annotator="alice")
    two = ReviewStore(folders, seed=1, readers="d1,d2", reader="d2")
    for a, b in zip(one.order, two.order):
        one.annotate(a, "genuine_followup", True)
        two.annotate(b, "new_task_prompt", False)
    for item_id in one.order[len(two.order) :]:
        one.annotate(item_id, "genuine_followup", True)
    assert one.state()["next"] is None and two.state()["next"] is None
    for path in folders:
        rows = [json.loads(x) for x in (path / "samples.jsonl").read_text().splitlines()]
        labels = [json.loads(x) for x in (path / "labels.jsonl").read_text().splitlines()]
        assert len(labels) == len(rows)  # nobody's labels were lost to the other session's saves
        assert {(x["reader"], x["annotator"], x["genuine"]) for x in labels} <= {("d1", "alice", True),
                                                                                  ("d2", "d2", False)}  # fmt: skip
        assert {x["run_id"] for x in labels} == {f"run-{path.name[-1]}"}
        assert len(read_labels(path / "labels.jsonl", rows, f"run-{path.name[-1]}")) == len(rows)  # `fic rates`
        human = [json.loads(x) for x in (path / "review" / "human_labels.jsonl").read_text().splitlines()]
        assert all({"reader", "annotator", "label", "genuine"} <= set(h) for h in human)
        assert {row_key(x) for x in labels} == {row_key(r) for r in rows}
    assert not list(tmp_path.rglob("*.tmp"))


def test_single_folder_usage_is_unchanged_and_records_the_reader(tmp_path):
    path = write_run(tmp_path / "x", "x", 9)
    store = ReviewStore(path, seed=2)
    assert store.reader == "r1" and store.annotator == "r1" and store.order == store.folders[0].order
    store.annotate(store.order[0], "meta_planning", False)
    (label,) = [json.loads(x) for x in (path / "labels.jsonl").read_text().splitlines()]
    assert label["reader"] == "r1" and label["annotator"] == "r1"
    assert json.loads((path / "review" / "order.json").read_text()) == {"seed": 2, "sample": None, "readers": ["r1"]}


def test_annotations_saved_before_readers_were_recorded_get_the_one_reader(tmp_path):
    path = write_run(tmp_path / "x", "x", 4)
    store = ReviewStore(path, seed=0)
    key = store.order[0]
    old = {key: {"label": "meta_planning", "genuine": False, "annotator": "old", "time": "t"}}  # no reader
    (path / "review" / "annotations.json").write_text(json.dumps(old))
    again = ReviewStore(path)
    again.annotate(again.order[1], "genuine_followup", True)
    readers = {x["annotator"]: x["reader"] for x in map(json.loads, (path / "labels.jsonl").read_text().splitlines())}
    assert readers == {"old": "r1", "r1": "r1"}


def test_a_reader_can_only_label_their_own_share(tmp_path):
    folders = runs(tmp_path, sizes=(6, 6, 6))
    one = ReviewStore(folders, seed=0, readers=2, reader="r1")
    two = ReviewStore(folders, seed=0, readers=2, reader="r2")
    with pytest.raises(ReviewError, match="not an item of this review"):
        one.annotate(two.order[0], "genuine_followup", True)


def test_parse_readers():
    assert parse_readers(3) == parse_readers("3") == ["r1", "r2", "r3"]
    assert parse_readers("d1, d2") == ["d1", "d2"]
    for bad in (0, "-1", "a,,b", "a,a", ""):
        with pytest.raises(ReviewError, match="--readers"):
            parse_readers(bad)


def _run(argv) -> int:
    parser = argparse.ArgumentParser()
    review_server.add_arguments(parser)
    return review_server.run(parser.parse_args([*argv, "--port", "0"]))


@pytest.mark.parametrize("case, argv, message", [
    ("unknown folder", ["{a}", "{root}/nope"], "nope: no such folder"),
    ("no samples", ["{a}", "{root}/empty"], "samples.jsonl not found"),
    ("no readers", ["{a}", "{b}", "--readers", "0"], "--readers 0: give at least one reader"),
    ("reader not in plan", ["{a}", "{b}", "--readers", "2", "--reader", "r3"], "'r3' is not a reader of the plan"),
    ("several readers, none named", ["{a}", "{b}", "--readers", "2"], "say which one this session is with --reader"),
    ("empty reader", ["{a}", "--readers", "2", "--reader", " "], "say which one this session is with --reader"),
    ("folder twice", ["{a}", "{root}/../{root_name}/a"], "is given twice"),
    ("bad sample", ["{a}", "{b}", "--sample", "0"], "--sample 0: give a positive number"),
])  # fmt: skip
def test_bad_input_is_one_clear_line(tmp_path, capsys, case, argv, message):
    write_run(tmp_path / "a", "a", 4)
    write_run(tmp_path / "b", "b", 4)
    (tmp_path / "empty").mkdir()
    names = {"a": tmp_path / "a", "b": tmp_path / "b", "root": tmp_path, "root_name": tmp_path.name}
    assert _run([x.format(**names) for x in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err, err


def test_folders_planned_differently_must_be_told_which_plan(tmp_path, capsys):
    a, b = write_run(tmp_path / "a", "a", 8), write_run(tmp_path / "b", "b", 8)
    ReviewStore(a, seed=1)
    ReviewStore(b, seed=2)
    with pytest.raises(ReviewError, match="different --seed"):
        ReviewStore([a, b])
    assert ReviewStore([a, b], seed=3).seed == 3


def _judge_labels_script():
    import importlib.util

    script = Path(__file__).parents[1] / "scripts" / "judge_labels.py"
    spec = importlib.util.spec_from_file_location("judge_labels", script)
    judge_labels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(judge_labels)
    return judge_labels


def test_judge_labels_collect_carries_reader_and_leaves_the_plan(tmp_path):
    judge_labels = _judge_labels_script()
    review = tmp_path / "review"
    for name in ("A", "double"):
        store = ReviewStore(write_run(review / name, name, 4), seed=7, annotator=f"ann-{name}")
        for item_id in store.order[:3]:
            store.annotate(item_id, "genuine_followup", True)
    plan = (review / "A" / "review" / "order.json").read_text()
    assert judge_labels.main(["collect", str(review), "--out", str(tmp_path / "out")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "out" / "labels.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and {(r["annotator"], r["reader"]) for r in rows} == {("ann-A", "r1")}
    assert (review / "A" / "review" / "order.json").read_text() == plan  # collect only reads
    assert json.loads((tmp_path / "out" / "double_agreement.json").read_text())["labelled"] == 3


def test_judge_labels_add_appends_new_items_with_their_model_and_refuses_labelled_items(tmp_path, capsys):
    judge_labels = _judge_labels_script()
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"model": "smollm2", "dataset": "gsm8k", "item_id": "1", "split": "test"}) + "\n")
    first = ReviewStore(write_run(tmp_path / "a", "a", 8), seed=3)
    for k, item_id in enumerate(first.order):
        first.annotate(item_id, "genuine_followup" if k % 2 else "new_task_prompt", bool(k % 2))
    second = ReviewStore(write_run(tmp_path / "a2", "a", 8), seed=4, annotator="other")
    for item_id in second.order[:4]:
        second.annotate(item_id, "new_task_prompt", False)
    out = tmp_path / "trained_fit.jsonl"
    argv = [
        "add",
        f"{tmp_path / 'a'}=collab_x",
        "--out",
        str(out),
        "--labels",
        str(labels),
        "--item-offset",
        "gsm8k=1000",
        "--double",
        f"{tmp_path / 'a2'}=collab_x",
        "--double-out",
        str(tmp_path / "double.jsonl"),
    ]
    assert judge_labels.main(argv) == 0
    added = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(added) == 8 and {r["model"] for r in added} == {"collab_x"}
    assert {r["item_id"] for r in added if r["dataset"] == "gsm8k"} == {
        "1000",
        "1001",
        "1002",
        "1003",
    }  # from line 1000
    assert {r["item_id"] for r in added if r["dataset"] == "mt_bench"} == {"0", "1", "2", "3"}
    assert all(r["split"] in ("train", "dev") and "confidence" not in r for r in added)
    splits = {(r["dataset"], r["item_id"]): r["split"] for r in added}
    assert all(splits[(r["dataset"], r["item_id"])] == r["split"] for r in added)  # one split per item
    report = json.loads(capsys.readouterr().out)
    assert report["added"] == 8 and report["double"]["pairs"] == 4
    # The same items again: refused in one line, the file untouched; so are items another labels file has.
    before = out.read_text()
    with pytest.raises(SystemExit, match="already have labels"):
        judge_labels.main(argv[:6])
    assert out.read_text() == before
    labels.write_text(json.dumps({"dataset": "mt_bench", "item_id": "0"}) + "\n")
    with pytest.raises(SystemExit, match="already have labels"):
        judge_labels.main(
            ["add", f"{tmp_path / 'a'}=collab_x", "--out", str(tmp_path / "new.jsonl"), "--labels", str(labels)]
        )
    assert not (tmp_path / "new.jsonl").exists()
