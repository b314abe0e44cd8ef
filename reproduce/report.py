"""`outputs/reproduce/report.md`, `report.html` and `summary.json` from the parts' sections (pure rendering)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from crosswalk import markdown as crosswalk_markdown
from repro import Section, judge_line

INTRO = (
    "The seed papers' tables, reproduced at the smallest real scale: SmolLM2-135M-Instruct on 2 CPU cores. "
    "135M parameters on CPU can show whether each method's mechanism moves the measured quantity in the claimed "
    "direction on a real instruct model with a real chat template; they cannot show the size of the papers' "
    "effects on multi-billion-parameter models, and the small samples here give wide intervals."
)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def _markdown(summary: dict, records: dict[str, dict]) -> str:
    lines = ["# fic reproduction on SmolLM2-135M-Instruct", "", INTRO, "",
             f"- Model: {summary['model']}", f"- {judge_line(summary['judge'])}",
             f"- Wall time: {summary['minutes']} min ({', '.join(f'{k} {v}' for k, v in summary['minutes_per_part'].items())})"]  # fmt: skip
    if machine := summary.get("machine"):
        lines.append(f"- Machine speed at the start: {machine['step_seconds']} s per reference step ({machine['reference']}; "
                     f"{machine['cpus']} CPUs): compare it across runs before comparing their minutes")  # fmt: skip
    if summary["parts_missing"]:
        lines.append(f"- Not run yet: {', '.join(summary['parts_missing'])}")
    if summary.get("crosswalk"):
        lines += ["", *crosswalk_markdown(summary["crosswalk"])]
    for record in records.values():
        section = Section.from_json(record["section"])
        lines += ["", f"## {record['title']}", ""]
        lines += [f"- {key}: {value}" for key, value in section.about.items()]
        lines.append(f"- time: {record['minutes']} min")
        if section.targets:
            lines += ["", "| target | wanted | measured | met |", "|---|---|---|---|"]
            lines += [
                f"| {t.name} | {t.target} | {t.measured} | {'yes' if t.met else '**no**'} |" for t in section.targets
            ]
        for table in section.tables:
            lines += ["", f"**{table.caption}**", "", "| " + " | ".join(table.columns) + " |",
                      "|" + "---|" * len(table.columns)]  # fmt: skip
            lines += ["| " + " | ".join(_cell(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |"
                      for row in table.rows]  # fmt: skip
        for paragraph in section.text:
            lines += ["", paragraph]
    return "\n".join(lines) + "\n"


def _inline(text: str) -> str:
    """Escape, then the inline marks the sections use: `code`, **bold** and an image `![alt](path)` (a part's figure,
    a path relative to the report)."""
    text = html.escape(text)
    text = re.sub(r"!\[([^\]]*)\]\(([^)\s]+)\)", r'<img alt="\1" src="\2">', text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", text)


def _html(markdown: str) -> str:
    """The Markdown above as HTML (headings, lists, tables, paragraphs: the only constructs `_markdown` writes)."""
    body, table = [], []

    def flush_table():
        if table:
            head, rows = table[0], table[2:]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            body.extend("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows)
            body.append("</table>")
            table.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            table.append([c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
            continue
        flush_table()
        if line.startswith("## "):
            body.append(f"<h2>{_inline(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{_inline(line[2:])}</h1>")
        elif line.startswith("- "):
            body.append(f"<li>{_inline(line[2:])}</li>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
    flush_table()
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
             "font-size:90%;vertical-align:top}th{background:#f3f3f3}")  # fmt: skip
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>fic reproduction</title><style>{style}</style>"
            f"</head><body>\n" + "\n".join(body) + "\n</body></html>\n")  # fmt: skip


def write_report(out: Path, summary: dict, records: dict[str, dict]) -> None:
    from fic.jsonl import write_json

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "summary.json", summary)
    markdown = _markdown(summary, records)
    (out / "report.md").write_text(markdown, encoding="utf-8")
    (out / "report.html").write_text(_html(markdown), encoding="utf-8")
