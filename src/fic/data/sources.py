"""The registry of dataset sources and `load_source`, the one way to read them.

A dataset is named by a spec: `NAME` loads the source's default copy from the Hugging Face hub (`datasets`),
`NAME@SPLIT` one split of it (`gsm8k@train`; see `fic.data.splits`), and `NAME:PATH` reads a local file with the
same schema instead (wherever a dataset is named on a command line). Either
way every row goes through the source's normaliser and comes back as a :class:`~fic.data.records.Record`.

| name | hub default | local file |
|---|---|---|
| `gsm8k` | `openai/gsm8k` (main, test; `gsm8k@train` for training) | `train.jsonl`, `test.jsonl` |
| `ifeval` | `google/IFEval` (train) | `input_data.jsonl` |
| `ifbench` | `allenai/IFBench_test` (train) | `IFBench_test.jsonl` |
| `gpqa`, `gpqa_main`, `gpqa_extended` | `Idavidrein/gpqa` (gpqa_diamond / gpqa_main / gpqa_extended; gated) | hub CSV |
| `mt_bench` | `HuggingFaceH4/mt_bench_prompts` (train) | FastChat `question.jsonl` (+ references beside) |
| `healthbench` | simple-evals `oss_eval.jsonl` URL | HealthBench JSONL |
| `coval` | `openai/coval` (train) | JSONL/JSON, schema in `fic.data.benchmarks.coval` |
| `ambigqa` | `sewon/ambig_qa` (light, validation) | `dev_light.json` |
| `lost_in_conversation` | `microsoft/lost_in_conversation` file `lost_in_conversation.json` | that file, `sharded_*.json` |
| `products` | none | DummyJSON `products.json` |
| `conversations` | none | JSONL of `{"messages": [...]}` |

GPQA's three subsets are three names (`gpqa` is the usual diamond set) because `gpqa:...` already means a path.
"""

from __future__ import annotations

import difflib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import benchmarks, interaction
from .benchmarks import LoadContext
from .readers import read_hub, read_local
from .records import DataError, Record

logger = logging.getLogger(__name__)

HEALTHBENCH_URL = (
    "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/2025-05-07-06-14-12_oss_eval.jsonl"
)


@dataclass(frozen=True)
class Source:
    """A dataset source: where its data lives and how a row becomes a `Record`.

    Args:
        name (`str`): Registry name, used in specs (`NAME` or `NAME:PATH`).
        normalize (`Callable[[dict, str, LoadContext], Record]`): Turns one raw row (and its location, for errors)
            into a record.
        description (`str`): One line for listings.
        formats (`tuple[str, ...]`, *optional*): Local file suffixes this source reads.
        hub_id (`str`, *optional*): Hub dataset id (or a URL of a JSON/JSONL file); `None` for local-only sources.
        hub_config (`str`, *optional*): Hub configuration name.
        hub_split (`str`, *optional*, defaults to `"train"`): Default hub split.
        hub_file (`str`, *optional*): Download this one file of the hub repo instead of using `datasets`.
        json_key (`str`, *optional*): For `.json` files shaped as a dict, the key holding the rows.
        setup (`Callable[[LoadContext], None]`, *optional*): Run once before the rows (e.g. read side files).
        no_hub_hint (`str`, *optional*): Why there is no hub copy, for the error raised on a bare `NAME`.
    """

    name: str
    normalize: Callable[[dict, str, LoadContext], Record]
    description: str
    formats: tuple[str, ...] = (".jsonl", ".json", ".parquet")
    hub_id: str | None = None
    hub_config: str | None = None
    hub_split: str = "train"
    hub_file: str | None = None
    json_key: str | None = None
    setup: Callable[[LoadContext], None] | None = None
    no_hub_hint: str = "it has no hub copy"


_GPQA = {"normalize": benchmarks.gpqa, "formats": (".csv", ".jsonl", ".json", ".parquet"), "hub_id": "Idavidrein/gpqa"}

SOURCES: dict[str, Source] = {
    source.name: source
    for source in (
        Source("gsm8k", benchmarks.gsm8k, "GSM8K grade-school math, final-number checker", hub_id="openai/gsm8k",
               hub_config="main", hub_split="test"),
        Source("ifeval", benchmarks.ifeval, "IFEval verifiable instructions (no checker shipped)",
               hub_id="google/IFEval"),
        Source("ifbench", benchmarks.ifeval,
               "IFBench out-of-distribution instructions (IFEval schema)", hub_id="allenai/IFBench_test"),
        Source("gpqa", description="GPQA diamond, shuffled multiple choice (gated)", hub_config="gpqa_diamond", **_GPQA),
        Source("gpqa_main", description="GPQA main set (gated)", hub_config="gpqa_main", **_GPQA),
        Source("gpqa_extended", description="GPQA extended set (gated)", hub_config="gpqa_extended", **_GPQA),
        Source("mt_bench", benchmarks.mt_bench, "MT-Bench two-turn questions, reference answers when beside",
               formats=(".jsonl", ".json", ".parquet"), hub_id="HuggingFaceH4/mt_bench_prompts",
               setup=benchmarks.mt_bench_setup),
        Source("healthbench", benchmarks.healthbench, "HealthBench conversations with rubrics",
               hub_id=HEALTHBENCH_URL),
        Source("coval", benchmarks.coval, "Prompts with candidate responses and rubrics", hub_id="openai/coval"),
        Source("ambigqa", interaction.ambigqa, "AmbigQA questions with disambiguated intents",
               hub_id="sewon/ambig_qa", hub_config="light", hub_split="validation"),
        Source("lost_in_conversation", interaction.lost_in_conversation,
               "Lost-in-Conversation sharded tasks (full instruction + shards)", formats=(".json", ".jsonl"),
               hub_id="microsoft/lost_in_conversation", hub_file="lost_in_conversation.json"),
        Source("products", interaction.products, "Product catalog (DummyJSON): vague requests, product as intent",
               formats=(".json", ".jsonl"), json_key="products",
               no_hub_hint="it has no hub copy (use DummyJSON's database/products.json)"),
        Source("conversations", interaction.conversations, "Generic conversations {'messages': [...]}",
               no_hub_hint="it is a generic format for your own files"),
    )
}  # fmt: skip


def register_source(source: Source, *, overwrite: bool = False) -> None:
    """Add a source to `SOURCES` (refuses to replace an existing name unless `overwrite=True`)."""
    if source.name in SOURCES and not overwrite:
        raise ValueError(f"source {source.name!r} is already registered; pass overwrite=True to replace it")
    SOURCES[source.name] = source


def parse_spec(spec: str) -> tuple[str, str | None]:
    """Split a dataset spec into `(name, path)`.

    Args:
        spec (`str`): `NAME` (hub) or `NAME:PATH` (local file); the name is case-insensitive.

    Returns:
        `tuple[str, str | None]`: The lower-cased name and the path, or `None` for a bare name.

    Example:
        ```python
        >>> parse_spec("gsm8k:/data/test.jsonl")
        ('gsm8k', '/data/test.jsonl')
        ```
    """
    if not isinstance(spec, str) or not spec.strip():
        raise DataError(f"dataset spec must be a non-empty string 'NAME' or 'NAME:PATH', got {spec!r}")
    name, sep, path = spec.strip().partition(":")
    name = name.strip().lower()
    if not name:
        raise DataError(f"dataset spec {spec!r} has no source name before ':'; expected 'NAME:PATH'")
    if sep and not path.strip():
        raise DataError(f"dataset spec {spec!r} has nothing after ':'; give a file path, or drop ':' to use the hub")
    return name, (path.strip() if sep else None)


def get_source(name: str) -> Source:
    """The registered source called `name`; an unknown name raises `DataError` (a `ValueError`) with the valid names."""
    if name in SOURCES:
        return SOURCES[name]
    close = difflib.get_close_matches(name, SOURCES, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise DataError(
        f"unknown dataset source {name!r}.{hint} Valid sources: {', '.join(sorted(SOURCES))} (`fic sources` lists them)"
    )


def split_spec(spec: str) -> tuple[str, str | None]:
    """`NAME@SPLIT` -> (`NAME`, `SPLIT`); any other spec -> (spec, None). Only hub specs (no `:`) carry `@SPLIT`."""
    if ":" in spec or "@" not in spec:
        return spec, None
    name, _, split = spec.partition("@")
    if not split.strip():
        raise DataError(f"dataset spec {spec!r}: nothing after '@'; name a split (e.g. {name}@train)")
    return name, split.strip()


def check_specs(field: str, specs) -> None:
    """Cheap checks of dataset specs before anything loads: known names, well-formed specs, local files that exist.

    Raises `DataError` naming `field` (a recipe key or a flag), the spec and the fix. Hub copies are not contacted.
    """
    for spec in specs or []:
        try:
            name, path = parse_spec(split_spec(spec)[0])
            get_source(name)
        except DataError as err:
            raise DataError(f"{field}: {err}") from None
        if path is not None and not Path(path).is_file():
            raise DataError(f"{field}: {spec!r}: local file {path!r} does not exist; check the path after '{name}:'")


def load_source(spec: str, limit: int | None = None, split: str | None = None) -> list[Record]:
    """Load a dataset as normalised records.

    Args:
        spec (`str`): `NAME` to load the source's hub copy, or `NAME:PATH` for a local file with the same schema.
        limit (`int`, *optional*): Keep only the first `limit` rows (read no further).
        split (`str`, *optional*): Hub split, overriding the source's default (e.g. `"train"`); local files have no
            splits, so it is ignored there with a warning.

    Returns:
        `list[Record]`: One record per row, in file order.

    Raises:
        `ValueError`: Unknown source name (with the valid names) or a bad `limit`.
        `DataError`: A malformed row (file, row and field named), a missing or unsupported local file, or a hub load
            that failed (the hub id named, with how to use a local copy instead).

    Example:
        ```python
        >>> records = load_source("gsm8k:../shared/data/gsm8k/test.jsonl", limit=2)
        >>> records[0].verifier
        {'type': 'gsm8k', 'answer': '18'}
        ```
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise DataError(f"limit must be a non-negative int or None, got {limit!r}")
    spec, named_split = split_spec(spec)  # NAME@SPLIT names the hub split; it wins over `split`
    split = named_split or split
    name, path = parse_spec(spec)
    source = get_source(name)
    if path is not None:
        if split is not None:
            logger.warning("split=%r ignored for %s: local files have no splits", split, spec)
        rows = read_local(path, source.formats, source.json_key)
    elif source.hub_id is None:
        raise DataError(f"source '{name}' cannot load from the hub: {source.no_hub_hint}; pass '{name}:PATH'")
    else:
        rows = read_hub(
            name,
            source.hub_id,
            config=source.hub_config,
            split=split or source.hub_split,
            formats=source.formats,
            filename=source.hub_file,
            json_key=source.json_key,
            limit=limit,
        )
    ctx = LoadContext(source=name, path=Path(path).expanduser() if path else None)
    if source.setup is not None:
        source.setup(ctx)
    records: list[Record] = []
    seen: dict[str, str] = {}
    for index, (where, row) in enumerate(rows):
        if limit is not None and index >= limit:
            break
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        ctx.index = index
        record = source.normalize(row, where, ctx)
        if record.id in seen:
            raise DataError(f"{where}: id {record.id!r} repeats {seen[record.id]}; ids must be unique within a load")
        seen[record.id] = where
        records.append(record)
    logger.info("loaded %d records from %s", len(records), spec)
    return records


def source_table() -> list[dict]:
    """One row per registered source: name, hub copy, local file formats and schema (the normaliser's first line)."""
    rows = []
    for source in SOURCES.values():
        hub = source.hub_id or f"none ({source.no_hub_hint})"
        if source.hub_id and (source.hub_config or source.hub_file):
            hub += f" [{source.hub_config or source.hub_file}]"
        if source.hub_id and not source.hub_file and not source.hub_id.startswith("http"):
            hub += f" split {source.hub_split}"
        schema = (source.normalize.__doc__ or "").strip().splitlines()
        rows.append({"name": source.name, "description": source.description, "hub": hub,
                     "formats": list(source.formats), "schema": schema[0] if schema else ""})  # fmt: skip
    return rows


def add_arguments(parser) -> None:
    """`fic sources`: the dataset names a spec (`NAME`, `NAME@SPLIT`, `NAME:PATH`) can use."""
    parser.add_argument("--json", action="store_true", help="print the table as JSON")


def run(args) -> int:
    rows = source_table()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("Name a dataset as NAME (its hub copy), NAME@SPLIT (one split of it) or NAME:PATH (a local file).\n")
    for row in rows:
        print(f"{row['name']}: {row['description']}\n  hub:   {row['hub']}\n"
              f"  local: {', '.join(row['formats'])}; {row['schema']}")  # fmt: skip
    return 0
