"""`fic review --foil-share`: foil turns (a model's turn shown after another item's conversation) mixed into the blind
session, unmarked and deterministic; their labels kept apart from the real ones; the context_free flag saved."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from test_review import request
from test_review_blind import JUDGES, MARKERS, _run, human, serve, walk

from fic.eval.rates import read_foil_labels, read_labels
from fic.eval.review.foils import allocate, draw_foils, foil_count, partners
from fic.eval.review.store import ReviewError, ReviewStore, stratum


def write_probe(directory, model: str, n_items: int = 24, judge: str = "A", greedy_repeats: bool = True):
    """A `fic probe`-like folder: n_items items over two datasets, T 0 (2 samples, the same greedy text when
    `greedy_repeats`) and T 1.0 (2 samples), each item with its own conversation; judged by `judge`."""
    directory.mkdir(parents=True, exist_ok=True)
    rows, i = [], 0
    for item in range(n_items):
        dataset = "gsm8k" if item % 3 else "mt_bench"
        for temperature in (0.0, 1.0):
            for sample in range(2):
                text = f"{model} greedy turn {item}" if temperature == 0 and greedy_repeats else \
                    f"{model} turn {item} t{temperature} s{sample}"  # fmt: skip
                rows.append({"model": f"secret-model-{model}", "dataset": dataset, "item_id": str(item),
                             "temperature": temperature, "perturbation": "none", "sample": sample,
                             "messages": [{"role": "user", "content": f"question of item {item}"},
                                          {"role": "assistant", "content": f"answer of item {item}"}],
                             "user_turn": text, **JUDGES[judge](i)})  # fmt: skip
                i += 1
    (directory / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "probe_meta.json").write_text(json.dumps({"run_id": f"run-{model}"}))
    return directory


def folders(root, judge="A", sizes=(24, 18, 30)):
    return [write_probe(root / f"folder-{m}", m, n, judge) for m, n in zip("xyz", sizes)]


def test_foil_count_and_allocation():
    assert foil_count(30, 0.2) == 8 and foil_count(30, 0.25) == 10 and foil_count(30, 0.0) == 0
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="--foil-share"):
            foil_count(30, bad)
    assert allocate({"a": 10, "b": 10, "c": 20}, 5) == {"a": 1, "b": 1, "c": 3}
    assert sum(allocate({"a": 3, "b": 7, "c": 1}, 6).values()) == 6


def test_partners_are_the_next_item_of_the_dataset_under_the_same_control():
    rows = {}
    for item, dataset in [("1", "d"), ("2", "d"), ("3", "d"), ("9", "e")]:
        for pert in ("none", "truncate"):
            rows[f"{item}{pert}"] = {"dataset": dataset, "item_id": item, "perturbation": pert,
                                     "messages": [{"role": "assistant", "content": f"{item}{pert}"}]}  # fmt: skip
    pair = partners(rows)
    assert pair["1none"] == "2none" and pair["3truncate"] == "1truncate" and pair["2truncate"] == "3truncate"
    assert "9none" not in pair  # a dataset of one item has no other conversation


def test_foils_are_drawn_outside_the_sample_with_fresh_text_and_deterministically(tmp_path):
    path = write_probe(tmp_path / "x", "x", 24)
    store = ReviewStore(path, sample=20, seed=3, foil_share=0.25)
    folder = store.folders[0]
    assert len(folder.order) == 20 and len(folder.foil_order) == foil_count(20, 0.25) == 7
    real_texts = [folder.rows[k]["user_turn"] for k in folder.order]
    foil_rows = [folder.foils[k] for k in folder.foil_order]
    foil_texts = [f["user_turn"] for f in foil_rows]
    assert not set(foil_texts) & set(real_texts) and len(set(foil_texts)) == len(foil_texts)
    for foil in foil_rows:
        turn = folder.rows[foil["turn_key"]]
        assert turn["user_turn"] == foil["user_turn"] and foil["turn_key"] not in folder.order
        assert foil["messages"] != turn["messages"]  # another item's whole conversation
        assert foil["messages"][0]["content"] == f"question of item {foil['context_item_id']}"
        assert foil["context_item_id"] != turn["item_id"]
    # the real sample is the one drawn without foils; the foils the same for the same seed, others for another
    assert ReviewStore(write_probe(tmp_path / "y", "x", 24), sample=20, seed=3).order == folder.order
    again = ReviewStore(path)  # the plan (seed, sample, share) is kept
    assert again.foil_share == 0.25 and again.folders[0].foil_order == folder.foil_order and again.order == store.order
    other = ReviewStore(write_probe(tmp_path / "z", "x", 24), sample=20, seed=4, foil_share=0.25)
    assert other.folders[0].foil_order != folder.foil_order
    plan = json.loads((path / "review" / "order.json").read_text())
    assert plan == {"seed": 3, "sample": 20, "readers": ["r1"], "foil_share": 0.25}


def test_foils_are_stratified_and_spread_over_items(tmp_path):
    rows_path = write_probe(tmp_path / "x", "x", 40, greedy_repeats=False)
    folder = ReviewStore(rows_path, sample=20, seed=0, foil_share=0.5).folders[0]
    drawn = [folder.foils[k] for k in folder.foil_order]
    assert len(drawn) == 20
    assert len({(f["dataset"], f["item_id"]) for f in drawn}) == 20  # enough items: no item twice
    strata = Counter(stratum(f) for f in drawn)
    assert max(strata.values()) - min(strata.values()) <= 6 and len(strata) == 4


def test_too_few_turns_for_the_foils_is_one_clear_error(tmp_path, capsys):
    path = write_probe(tmp_path / "x", "x", 6)
    with pytest.raises(ReviewError, match="foil turns asked, but only"):
        ReviewStore(path, seed=0, foil_share=0.5)  # every turn is in the sample: no turn left to be a foil
    with pytest.raises(ReviewError, match="--foil-share 1.0: give a share in"):
        ReviewStore(path, seed=0, sample=4, foil_share=1.0)
    assert _run([str(path), "--sample", "4", "--foil-share", "-0.2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--foil-share -0.2" in err
    with pytest.raises(ValueError, match="foil turns asked"):
        draw_foils({}, [], 0, 3, stratum)


def test_foils_are_dealt_evenly_and_interleaved_unmarked(tmp_path):
    paths = folders(tmp_path)
    stores = [ReviewStore(paths, sample=12, seed=5, readers=2, reader=r, foil_share=0.25) for r in ("r1", "r2")]
    for store in stores:
        foils = [i for i in store.order if store.rows[i].get("foil")]
        assert len(foils) in (6, 7) and len(store.order) in (24, 25)  # 3 folders x 4 foils, 3 x 12 real, dealt
        by_model = Counter(store.rows[i]["model"] for i in foils)
        assert all(count in (1, 2, 3) for count in by_model.values()) and len(by_model) == 3
        places = [n for n, i in enumerate(store.order) if store.rows[i].get("foil")]
        assert places != list(range(len(store.order) - len(places), len(store.order)))  # not all at the end
        assert all(len(i) == 16 for i in store.order)
        items = [store.item(n) for n in range(len(store.order))]
        assert all(set(x) == {"id", "index", "total", "messages", "user_turn", "annotation"} for x in items)
        assert "foil" not in json.dumps(items + [store.state()])
    assert not set(stores[0].order) & set(stores[1].order)
    # the real turns are dealt as in a plan without foils
    plain = ReviewStore(folders(tmp_path / "plain"), sample=12, seed=5, readers=2, reader="r1")
    real = sorted(store_turns := [stores[0].rows[i]["user_turn"] for i in stores[0].order if
                                  not stores[0].rows[i].get("foil")])  # fmt: skip
    assert len(store_turns) == len(plain.order) and real == sorted(plain.rows[i]["user_turn"] for i in plain.order)


@pytest.mark.parametrize("kw", [{"sample": 12, "seed": 5, "foil_share": 0.25},
                                {"sample": 12, "seed": 2, "readers": 2, "reader": "r2", "foil_share": 0.2}])  # fmt: skip
def test_with_foils_nothing_from_the_judge_reaches_the_reader(tmp_path, kw):
    """The foils, like the real sample, are the same whatever the judge said, and nothing served names them."""
    (before_a, after_a), (before_b, after_b) = (walk(folders(tmp_path / j, j), human, **kw) for j in JUDGES)
    assert before_a == before_b
    for body in before_a:
        text = body.decode()
        assert not any(marker in text for marker in (*MARKERS, "foil", "context_item")), text[:300]


def test_foil_labels_go_to_their_own_file_and_not_to_the_real_ones(tmp_path):
    path = write_probe(tmp_path / "x", "x", 24)
    store = ReviewStore(path, sample=20, seed=1, foil_share=0.25, annotator="ann")
    for n, item_id in enumerate(store.order):
        genuine = n % 2 == 0
        store.annotate(item_id, "genuine_followup" if genuine else "new_task_prompt", genuine, genuine and n % 4 == 0)
    rows = [json.loads(x) for x in (path / "samples.jsonl").read_text().splitlines()]
    real = read_labels(path / "labels.jsonl", rows, "run-x")
    foils = read_foil_labels(path / "foil_labels.jsonl", rows, "run-x")
    assert len(real) == 20 and len(foils) == 7 and all(f["foil"] is True for f in foils)
    assert all("foil" not in r for r in real) and all(r["context_free"] in (True, False) for r in real)
    assert {f["context_item_id"] for f in foils} <= {r["item_id"] for r in rows}
    human_rows = (path / "review" / "human_labels.jsonl").read_text().splitlines()
    assert len(human_rows) == 20  # the judge-agreement file holds the real turns only
    agreement = store.agreement()
    assert agreement["annotated"] == 27 and agreement["n"] + agreement["excluded"] == 20
    saved = store.item(0)["annotation"]
    assert set(saved) == {"label", "genuine", "context_free"}
    assert read_labels(path / "foil_labels.jsonl", rows, "run-x") == []  # `read_labels` never returns a foil


def test_context_free_is_saved_checked_and_sent_by_the_api(tmp_path):
    path = write_probe(tmp_path / "x", "x", 12)
    store = ReviewStore(path, seed=0, sample=6)
    first, second, third = store.order[:3]
    store.annotate(first, "genuine_followup", True, True)
    store.annotate(second, "new_task_prompt", False)
    store.annotate(third, "genuine_followup", True)  # not said: unknown
    labels = {r["turn_sha"]: r for r in map(json.loads, (path / "labels.jsonl").read_text().splitlines())}
    assert sorted(str(r["context_free"]) for r in labels.values()) == ["False", "None", "True"]
    with pytest.raises(ReviewError, match="context_free marks a genuine"):
        store.annotate(first, "new_task_prompt", False, True)
    with pytest.raises(ReviewError, match="context_free must be true, false or left out"):
        store.annotate(first, "genuine_followup", True, "yes")
    assert store.state()["flags"][0]["name"] == "context_free"
    srv, port = serve([path])
    try:
        item = json.loads(request(port, "GET", "/api/item?i=3")[2])
        body = {"id": item["id"], "label": "genuine_followup", "genuine": True, "context_free": True}
        assert request(port, "POST", "/api/annotate", body)[0] == 200
        status, _, answer = request(port, "POST", "/api/annotate", {**body, "context_free": 1})
        assert status == 400 and "context_free must be" in json.loads(answer)["error"]
        assert json.loads(request(port, "GET", "/api/item?i=3")[2])["annotation"]["context_free"] is True
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_page_has_the_context_free_checkbox_for_genuine_labels():
    from fic.eval.review.server import STATIC_DIR

    page, script = (STATIC_DIR / "index.html").read_text(), (STATIC_DIR / "app.js").read_text()
    assert 'id="context-free"' in page and 'id="context-free-box" hidden' in page
    assert "context_free:" in script and 'genuine === "yes" ? $("context-free").checked : false' in script
