"""Safe HTML building blocks for the evaluation reports.

Model text is hostile input: a generated user turn can hold `<script>`, `<img onerror=...>` or a `javascript:` link.
Every builder here escapes whatever it is given unless the value is already `Html` (markup these builders made), so
a caller cannot forget to escape. Links only point to relative paths inside the report's own folder tree, images
are embedded PNG bytes, and each page carries a Content-Security-Policy that forbids every script, so even a bug
in escaping could not run code. No JavaScript is used: samples are browsable through `<details>` elements.
"""

from __future__ import annotations

import base64
import html
import os
import re
from collections.abc import Iterable
from pathlib import Path

from fic.jsonl import write_json  # noqa: F401  (re-exported for report writers)

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Relative paths only: optional leading `../` steps, then plain path characters (no scheme, no `..`, no `/` start).
_SAFE_HREF = re.compile(r"^(\.\./)*(?!.*\.\.)[A-Za-z0-9_#-][A-Za-z0-9_./#-]*$")

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; padding: 0 1rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 0.25rem 0; }
pre { white-space: pre-wrap; word-break: break-word; background: #f8f8f8; padding: 0.5rem; margin: 0.25rem 0; }
.role { font-size: 0.8rem; color: #666; text-transform: uppercase; margin-top: 0.5rem; }
.generated { border-left: 3px solid #2a7; } .note { color: #666; font-size: 0.85rem; }
details { margin: 0.2rem 0; } summary { cursor: pointer; } img { max-width: 100%; margin: 0.5rem 1rem 0.5rem 0; }
"""


class Html(str):
    """Markup built by this module (already escaped); everything else is treated as text."""


def esc(value) -> Html:
    """`value` as HTML text (quotes escaped too, so it is also safe inside attribute values)."""
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable) -> Html:
    return Html("".join(esc(p) for p in parts))


def tag(name: str, *children, cls: str | None = None, **attrs) -> Html:
    """`<name attrs>children</name>` with every child escaped unless it is `Html`. Attribute names are fixed by
    the caller (never data); `href` and `src` are checked separately by `link` and `png`."""
    attr = "".join(f' {k.rstrip("_")}="{esc(v)}"' for k, v in attrs.items() if v is not None)
    if cls:
        attr = f' class="{esc(cls)}"' + attr
    return Html(f"<{name}{attr}>{join(children)}</{name}>")


def fmt(value, digits: int = 3) -> str:
    """Numbers for tables: floats rounded, None as an em dash."""
    if value is None:
        return "\u2014"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def rate_cell(cell: dict | None) -> str:
    """`0.367 [0.250, 0.500] n=30` for a rate with its interval."""
    if not cell:
        return "\u2014"
    text = f"{cell['rate']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}] n={cell['n']}"
    if cell.get("judge_errors"):
        text += f" ({cell['judge_errors']} judge errors)"
    return text


def table(headers: list, rows: list[list], caption: str | None = None) -> Html:
    """A table of text cells; numbers are right-aligned."""
    head = tag("tr", *[tag("th", h) for h in headers])
    body = []
    for row in rows:
        cells = [
            tag("td", fmt(c), cls="num")
            if isinstance(c, (int, float)) and not isinstance(c, bool)
            else tag("td", c if isinstance(c, str) else fmt(c))
            for c in row
        ]
        body.append(tag("tr", *cells))
    parts = [tag("caption", caption)] if caption else []
    return tag("table", *parts, tag("thead", head), tag("tbody", *body))


def link(href: str, text) -> Html:
    """A link to a relative path of a run's own files; anything else (a scheme, an absolute path) is plain text."""
    if not _SAFE_HREF.match(href):
        return esc(text)
    return tag("a", text, href=href)


def png(data_or_path: bytes | str | Path, alt: str) -> Html:
    """An embedded PNG (a data: URI), so a report is one self-contained file. Non-PNG input is refused."""
    data = data_or_path if isinstance(data_or_path, bytes) else Path(data_or_path).read_bytes()
    if not data.startswith(PNG_MAGIC):
        raise ValueError(f"png({alt!r}): not PNG data; plots must be written as PNG files")
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    return Html(f'<img src="{uri}" alt="{esc(alt)}">')


def plots(paths: Iterable[Path]) -> Html:
    return join(png(p, Path(p).stem.replace("_", " ")) for p in paths if Path(p).is_file())


def conversation(messages: list[dict], generated: str | None = None, generated_role: str = "user") -> Html:
    """A conversation as role-labelled text blocks; the generated turn (if any) is marked."""
    parts = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):  # OpenAI-style text parts
            content = "\n".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        parts += [tag("div", message.get("role", "?") if isinstance(message, dict) else "?", cls="role"),
                  tag("pre", content)]  # fmt: skip
    if generated is not None:
        parts += [tag("div", f"{generated_role} (generated)", cls="role"), tag("pre", generated, cls="generated")]
    return join(parts)


def details(summary, *body) -> Html:
    return tag("details", tag("summary", summary), *body)


def page(title: str, *sections, subtitle: str | None = None) -> str:
    """A complete HTML document with the no-script Content-Security-Policy."""
    head = (
        '<meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="referrer" content="no-referrer">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style>"
    )
    top = tag("h1", title) + (tag("p", subtitle, cls="note") if subtitle else "")
    return f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>{top}{join(sections)}</body></html>\n'


def section(title: str, *body) -> Html:
    return join([tag("h2", title), *body])


def write_page(path: str | Path, document: str) -> Path:
    """Write the page atomically (temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # own name: two processes may write one file
    tmp.write_text(document, encoding="utf-8")
    os.replace(tmp, path)
    return path
