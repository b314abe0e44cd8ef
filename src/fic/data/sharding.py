"""Sharding fully specified instructions into Lost-in-Conversation shards.

A sharded instruction delivers the same information over several user turns: the first shard states what is asked,
each later shard carries one fact. Two sharders:

- `shard_math_problem(text)`: deterministic rules for math word problems. The problem is split into sentences (numbers
  such as `3.5`, `$1,200.50` and abbreviations such as `Mr.` do not end a sentence); the question sentence (the last
  one with `?`, else the last one) becomes the first shard, with a leading condition (`If she sells the rest for $2,
  how much ...`) split off into a fact shard of its own; every other sentence becomes a fact shard, and a compound
  sentence whose clauses each hold a number (`...; ...`, `..., and ...`) is split into one shard per clause. Shards
  partition the text, so every number of the original lands in exactly one shard (`check_coverage` verifies it).
- `LLMSharder`: the Lost-in-Conversation procedure through an OpenAI-compatible chat endpoint (or any
  `complete(messages) -> str` callable): (1) segment the instruction into atomic units of information, (2) rephrase
  the units into conversational shards, the first one stating the high-level request, (3) verify: every number of
  the original in exactly one shard (deterministic), and optionally the model's own yes/no judgement that the shards
  together say everything the instruction says. A failed attempt is retried; after `max_attempts` it raises
  `ShardingError` or, with `fallback="rules"`, returns the rule-based shards.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from fic.errors import FicError

logger = logging.getLogger(__name__)

NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million "
    "billion half twice thrice double triple quarter dozen"
).split()
_NUMERAL = r"\d+(?:,\d{3})*(?:\.\d+)?"
_NUMBER_RE = re.compile(rf"(?<![\w.]){_NUMERAL}|\b(?:{'|'.join(NUMBER_WORDS)})\b", re.IGNORECASE)
_ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "vs", "etc", "e.g", "i.e", "a.m", "p.m", "approx", "No")
_QUESTION_START = re.compile(
    r"\b(how|what|which|who|whom|whose|when|where|why|find|calculate|compute|determine)\b", re.IGNORECASE
)


class ShardingError(FicError, ValueError):
    """An instruction could not be sharded so that every piece of information lands in exactly one shard."""


def numbers_in(text: str) -> list[str]:
    """The numbers of `text` as written (numerals with their separators, and number words), in order."""
    return [m.group(0).lower().replace(",", "") for m in _NUMBER_RE.finditer(text)]


def check_coverage(original: str, shards: list[str]) -> list[str]:
    """Problems with `shards` as a sharding of `original`; empty when every number of the original lands in exactly
    one shard and the shards bring no number of their own."""
    problems = []
    if not shards:
        return ["no shards"]
    if any(not isinstance(s, str) or not s.strip() for s in shards):
        problems.append("an empty shard")
    want = Counter(numbers_in(original))
    got = Counter(n for s in shards for n in numbers_in(s))
    for number, count in want.items():
        if got[number] < count:
            problems.append(f"number {number!r} of the original is missing from the shards")
        elif got[number] > count:
            problems.append(f"number {number!r} appears in more shards than in the original")
    for number in got.keys() - want.keys():
        problems.append(f"number {number!r} in the shards is not in the original")
    return problems


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`; a period inside a number or after a known abbreviation does not end one."""
    protected = text.strip()
    for abbreviation in _ABBREVIATIONS:
        protected = re.sub(rf"\b{re.escape(abbreviation)}\.", abbreviation.replace(".", "\0") + "\0", protected)
    parts = re.split(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]*[A-Z0-9$])|\n+", protected)
    return [p.replace("\0", ".").strip() for p in parts if p and p.strip()]


def _capitalise(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] if text else text


def _end_sentence(text: str) -> str:
    text = text.strip().rstrip(",;:")
    return text if text.endswith((".", "!", "?")) else text + "."


def _split_clauses(sentence: str) -> list[str]:
    """Split a compound fact at `;`, `, and|but|while|then` or a bare ` and ` when every clause holds a number (a bare
    ` and ` only before a word that is not a number, so `between 3 and 5` stays whole)."""
    parts = re.split(r";\s+|,\s+(?=(?:and|but|while|then|whereas)\s)", sentence)
    if len(parts) < 2 or not all(numbers_in(p) for p in parts):
        parts = re.split(r"\s+(?=and\s+(?!(?:\$?\d|" + "|".join(NUMBER_WORDS) + r")\b)[a-z])", sentence)
    if len(parts) < 2 or not all(numbers_in(p) for p in parts):
        return [sentence]
    out = []
    for part in parts:
        part = re.sub(r"^(?:and|but|while|then|whereas)\s+", "", part.strip())
        out.append(_end_sentence(_capitalise(part)))
    return out


def _split_question(sentence: str) -> tuple[str | None, str]:
    """`(condition, question)`: a leading clause before the question word, or a trailing `if ...` clause that holds a
    number, becomes a fact of its own."""
    tail = re.search(r"\s+(?:if|given that|assuming)\s+(.+?)\?*$", sentence)
    if tail and numbers_in(tail.group(1)) and _QUESTION_START.search(sentence[: tail.start()]):
        return _end_sentence(_capitalise(tail.group(1))), sentence[: tail.start()].rstrip(" ,") + "?"
    for match in _QUESTION_START.finditer(sentence):
        head = sentence[: match.start()].rstrip()
        if match.start() > 0 and head.endswith(","):
            condition = re.sub(r"^(?:if|suppose|given that|assuming)\s+", "", head.rstrip(",").strip(), flags=re.I)
            if numbers_in(condition) or len(condition.split()) >= 3:
                return _end_sentence(_capitalise(condition)), _capitalise(sentence[match.start() :])
        break
    return None, sentence


def shard_math_problem(text: str) -> list[str]:
    """Shard a math word problem: the question first, then one fact per shard (see the module docstring).

    Raises:
        ShardingError: when `text` is empty.
    """
    if not isinstance(text, str) or not text.strip():
        raise ShardingError(f"text: expected a non-empty problem statement, got {text!r:.60}")
    sentences = split_sentences(text)
    questions = [i for i, s in enumerate(sentences) if s.rstrip().endswith("?")]
    q = questions[-1] if questions else len(sentences) - 1
    condition, question = _split_question(sentences[q])
    facts = [c for i, s in enumerate(sentences) if i != q for c in _split_clauses(s)]
    if condition is not None:
        facts.extend(_split_clauses(condition))
    shards = [question.strip(), *facts]
    problems = check_coverage(text, shards)
    if problems:  # cannot happen for a partition, but the promise is checked rather than assumed
        raise ShardingError(f"rule sharder broke its coverage promise on {text!r:.80}: {'; '.join(problems)}")
    return shards


SEGMENT_PROMPT = """You split a fully specified instruction into atomic units of information, as in the
Lost in Conversation benchmark. Copy the wording; every number must appear in exactly one unit; drop nothing.
Reply with a JSON list of strings and nothing else.

Instruction:
{instruction}"""

REPHRASE_PROMPT = """Turn these units of information into shards that a user would reveal one per turn in a
conversation. The first shard states the high-level request (what is asked) without details; every later shard adds
exactly one unit, rephrased as a short, natural user message. Keep every number exactly as written, each in exactly
one shard, and add no information. Reply with a JSON list of strings and nothing else.

Instruction:
{instruction}

Units:
{segments}"""

VERIFY_PROMPT = """Do these shards, taken together, state everything the instruction states, so that the task can be
solved from the shards alone? Answer with one word: yes or no.

Instruction:
{instruction}

Shards:
{shards}"""


def _json_list(reply: str) -> list[str]:
    match = re.search(r"\[.*\]", reply, re.DOTALL)
    if not match:
        raise ShardingError(f"expected a JSON list of strings, got {reply!r:.80}")
    try:
        value = json.loads(match.group(0))
    except json.JSONDecodeError as err:
        raise ShardingError(f"expected a JSON list of strings ({err}), got {reply!r:.80}") from None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ShardingError(f"expected a non-empty JSON list of non-empty strings, got {value!r:.80}")
    return [v.strip() for v in value]


@dataclass
class LLMSharder:
    """Lost-in-Conversation sharding through a chat model.

    Args:
        complete: `complete(messages) -> str`, one chat completion (e.g. a stub in tests); or None with
            `base_url` and `model` for an OpenAI-compatible endpoint (`fic.generation.openai_http.chat_complete`).
        base_url: the endpoint's API root (e.g. `http://127.0.0.1:8000/v1`).
        model: the model name the endpoint expects.
        max_attempts: tries per instruction before giving up.
        verify_with_model: also ask the model whether the shards say everything (step 3); the number check always
            runs.
        fallback: `"error"` (raise `ShardingError`) or `"rules"` (`shard_math_problem`) after `max_attempts`.
        temperature: sampling temperature of the requests (0 for reproducible shards).
    """

    complete: Callable[[list[dict]], str] | None = None
    base_url: str | None = None
    model: str | None = None
    max_attempts: int = 3
    verify_with_model: bool = True
    fallback: str = "error"
    temperature: float = 0.0

    def __post_init__(self):
        if self.complete is None:
            if not self.base_url or not self.model:
                raise ValueError("LLMSharder: pass complete=callable, or base_url= and model= for an endpoint")
            self.complete = self._endpoint_complete
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: expected at least 1, got {self.max_attempts!r}")
        if self.fallback not in ("error", "rules"):
            raise ValueError(f"fallback: unknown value {self.fallback!r}; valid: error, rules")

    def _endpoint_complete(self, messages: list[dict]) -> str:
        from fic.generation.openai_http import chat_complete, run_sync  # fic.generation imports torch

        return run_sync(
            lambda: chat_complete(messages, model=self.model, base_url=self.base_url, temperature=self.temperature)
        )

    def _ask(self, prompt: str) -> str:
        return self.complete([{"role": "user", "content": prompt}])

    def attempt(self, instruction: str) -> list[str]:
        """One segment / rephrase / verify pass; raises `ShardingError` naming the failed step."""
        segments = _json_list(self._ask(SEGMENT_PROMPT.format(instruction=instruction)))
        problems = check_coverage(instruction, segments)
        if problems:
            raise ShardingError(f"segment step: {'; '.join(problems)}")
        listing = "\n".join(f"- {s}" for s in segments)
        shards = _json_list(self._ask(REPHRASE_PROMPT.format(instruction=instruction, segments=listing)))
        problems = check_coverage(instruction, shards)
        if problems:
            raise ShardingError(f"rephrase step: {'; '.join(problems)}")
        if self.verify_with_model:
            listing = "\n".join(f"{i + 1}. {s}" for i, s in enumerate(shards))
            verdict = self._ask(VERIFY_PROMPT.format(instruction=instruction, shards=listing)).strip().lower()
            if not verdict.startswith("yes"):
                raise ShardingError(f"verify step: the model says the shards lose information ({verdict[:40]!r})")
        return shards

    def shard(self, instruction: str) -> list[str]:
        """Shards of `instruction`, retrying failed attempts (see the class docstring)."""
        if not isinstance(instruction, str) or not instruction.strip():
            raise ShardingError(f"instruction: expected a non-empty string, got {instruction!r:.60}")
        errors = []
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self.attempt(instruction)
            except ShardingError as err:
                errors.append(f"attempt {attempt}: {err}")
                logger.info("sharding attempt %d failed: %s", attempt, err)
        if self.fallback == "rules":
            logger.warning("LLM sharding failed %d times; using the rule sharder (%s)", self.max_attempts, errors[-1])
            return shard_math_problem(instruction)
        raise ShardingError(f"no valid sharding after {self.max_attempts} attempts: " + " | ".join(errors))
