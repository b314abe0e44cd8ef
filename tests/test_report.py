"""HTML reports: tables computed from the rows, self-contained pages, and model text that stays inert text."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from fic.eval import report
from fic.eval.report_html import link, png

HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    '"><svg onload=alert(1)>',
    "<a href='javascript:alert(1)'>x</a>",
    "javascript:alert(1)",
]


class Elements(HTMLParser):
    """Every element and attribute of a page, and its text."""

    def __init__(self, document: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.feed(document)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def assert_inert(document: str) -> Elements:
    """No script element, no event-handler attribute, no javascript: URL, only embedded PNG images, the CSP meta."""
    page = Elements(document)
    names = [t for t, _ in page.tags]
    assert "script" not in names and "svg" not in names and "iframe" not in names
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            if name in ("href", "src"):
                assert not (value or "").strip().lower().startswith("javascript:"), (tag, name, value)
        if tag == "img":
            assert attrs["src"].startswith("data:image/png;base64,")
        if tag == "a":
            assert not attrs["href"].startswith(("/", "http")), attrs
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]["content"] and "script-src" not in csp[0]["content"]
    return page


def probe_rows(hostile: bool = True) -> list[dict]:
    rows = []
    for i, (temp, genuine, label) in enumerate([
        (0.0, True, "genuine_followup"), (0.0, False, "meta_planning"), (0.0, False, "degenerate_short"),
        (0.0, True, "genuine_followup"), (1.0, True, "genuine_followup"), (1.0, None, "judge_error"),
    ]):  # fmt: skip
        bad = HOSTILE[i % len(HOSTILE)] if hostile else ""
        rows.append({
            "dataset": "healthbench", "item_id": f"h{i}{bad}", "temperature": temp, "perturbation": "none",
            "sample": 0, "messages": [{"role": "user", "content": f"q{i} {bad}"},
                                      {"role": "assistant", "content": f"a{i} {bad}"}],
            "user_turn": f"turn {i} {bad}", "label": label, "genuine": genuine, "rationale": f"why {bad}",
            "judge": "heuristic",
        })  # fmt: skip
    return rows


def test_probe_tables_count_from_rows():
    tables = report.probe_tables(probe_rows())
    cold = tables["rates"][("", "healthbench", "none", 0.0)]
    assert (cold["rate"], cold["n"], cold["judge_errors"]) == (0.5, 4, 0)
    hot = tables["rates"][("", "healthbench", "none", 1.0)]
    assert (hot["rate"], hot["n"], hot["judge_errors"]) == (1.0, 1, 1)  # the judge error is not a failure
    assert tables["labels"][("", "healthbench", 0.0)] == {"genuine_followup": 0.5, "meta_planning": 0.25,
                                                         "degenerate_short": 0.25}  # fmt: skip


def test_probe_report_tables_and_inert_text(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-report-secret-123")
    rows = probe_rows()
    summary = {
        "accuracy": {"healthbench": {"accuracy": 0.25, "n": 4}},
        "percent_changed": {"question": {"overall": {"changed": 0.5, "n": 4}}},
        "settings": {"datasets": ["healthbench"], "judge_base_url": "https://user:hunter2pass@judge.example/v1",
                     "judge_api_key": "sk-should-not-show", "note": "key sk-test-report-secret-123 leaked"},
    }  # fmt: skip
    path = report.probe_report(summary, rows, tmp_path / "report.html")
    document = path.read_text()
    page = assert_inert(document)
    text = "".join(page.text)
    for bad in HOSTILE:
        assert bad in text  # shown as text, exactly
    assert "0.500 [" in text and "n=4" in text  # T=0 cell: 2 genuine of 4
    assert "1.000 [" in text and "(1 judge errors)" in text
    assert "genuine_followup" in text and "meta_planning" in text
    for secret in ("hunter2pass", "sk-should-not-show", "sk-test-report-secret-123"):
        assert secret not in document
    assert not list(tmp_path.glob("*.tmp"))


def test_probe_report_embeds_plots_and_caps_samples(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    fig.savefig(tmp_path / "rate_vs_temperature.png")
    plt.close(fig)
    rows = probe_rows(hostile=False) * 3
    path = report.probe_report({}, rows, tmp_path / "report.html", max_samples=5)
    page = assert_inert(path.read_text())
    assert sum(1 for t, _ in page.tags if t == "img") == 1
    assert sum(1 for t, _ in page.tags if t == "details") == 5 + 2  # 5 samples in 2 (dataset, T, control) groups
    assert "5 of 18 shown" in "".join(page.text)


def test_lic_and_regret_reports_inert(tmp_path):
    bad = HOSTILE[1]
    lic_summary = {"modes": {"full": {"P": 0.9, "A90": 1.0, "U90_10": 0.1, "n_tasks": 2, "episodes": 2},
                             "sharded": {"P": 0.45, "A90": 1.0, "U90_10": 1.0, "n_tasks": 2, "episodes": 2}},
                   "sharded_over_full": 0.5, "runs": 1, "temperature": 0.0, "n_tasks": 2}  # fmt: skip
    episodes = [{"task_id": f"t{bad}", "mode": "sharded", "run": 0, "correct": False,
                 "messages": [{"role": "user", "content": bad}, {"role": "assistant", "content": HOSTILE[0]}]}]  # fmt: skip
    page = assert_inert(report.lic_report(lic_summary, episodes, tmp_path / "lic" / "report.html").read_text())
    text = "".join(page.text)
    assert bad in text and HOSTILE[0] in text and "0.450" in text and "sharded_over_full p_sharded / p_full" in text

    regret_summary = {"scenario": "products", "policy": f"model{bad}", "regret": 0.25, "value": 0.5,
                      "reference_value": 0.75, "resolution": {"rate": 0.5}, "resolution_rate": 0.5,
                      "turns_mean": 1.5, "episodes": 4, "ineffective_clarification": {"rate": 0.2},
                      "stopping_errors": {"rate": 0.1},
                      "per_profile": {"terse": {"regret": 0.5, "value": 0.25, "episodes": 2}}}  # fmt: skip
    regret_eps = [{"key": f"e1|terse{bad}", "profile": "terse", "value": 0.5, "regret": 0.25,
                   "transcript": [{"role": "user", "content": HOSTILE[2]}]}]  # fmt: skip
    page = assert_inert(report.regret_report(regret_summary, regret_eps, tmp_path / "regret" / "report.html")
                        .read_text())  # fmt: skip
    text = "".join(page.text)
    assert HOSTILE[2] in text and "0.250" in text and "terse" in text and f"model{bad}" in text


def test_run_report_links_only_existing_reports(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-2" / "eval" / "probe").mkdir(parents=True)
    (run / "checkpoint-2" / "eval" / "probe" / "report.html").write_text("x")
    comparison = {
        "checkpoints": [
            {"step": 1, "checkpoint": "checkpoint-1", "metrics": {"probe/healthbench/genuine_rate@t0.7": 0.25}},
            {"step": 2, "checkpoint": "checkpoint-2", "metrics": {"probe/healthbench/genuine_rate@t0.7": 0.5,
                                                                  f"lic/p_{HOSTILE[0]}": 1.0}},
        ],
        "metrics": ["probe/healthbench/genuine_rate@t0.7", f"lic/p_{HOSTILE[0]}"],
        "config": {"datasets": ["healthbench"], "temperatures": [0.7]},
    }  # fmt: skip
    page = assert_inert(report.run_report(run, comparison).read_text())
    hrefs = [a["href"] for t, a in page.tags if t == "a"]
    assert hrefs == ["../checkpoint-2/eval/probe/report.html"]
    text = "".join(page.text)
    assert "(files removed)" in text  # checkpoint-1 was rotated away; its row stays, without a link
    assert "step 1" in text and "0.250" in text and "0.500" in text and HOSTILE[0] in text


def test_report_dir_rebuilds_from_files(tmp_path):
    from fic.jsonl import append_rows, write_json

    append_rows(tmp_path / "samples.jsonl", probe_rows(hostile=False))
    write_json(tmp_path / "summary.json", {"settings": {"samples": 1}})
    path = report.report_dir("probe", tmp_path)
    assert "0.500 [" in path.read_text()
    with pytest.raises(ValueError, match="valid: probe, lic, regret"):
        report.report_dir("nope", tmp_path)


@pytest.mark.parametrize("href", ["javascript:alert(1)", "JAVASCRIPT:x", "/etc/passwd", "http://evil.example/",
                                  "data:text/html,x", "a/../../b", "..", "//evil.example"])  # fmt: skip
def test_link_refuses_anything_but_relative_paths(href):
    assert "<a" not in link(href, "t")


def test_link_and_png_accept_their_own_inputs(tmp_path):
    assert link("../checkpoint-3/eval/probe/report.html", "probe").startswith('<a href="../checkpoint-3/')
    with pytest.raises(ValueError, match="not PNG data"):
        png(b"<svg onload=alert(1)>", "plot")
    (tmp_path / "x.png").write_bytes(b"GIF89a....")
    with pytest.raises(ValueError, match="not PNG data"):
        png(tmp_path / "x.png", "plot")
