"""Automatic answer checkers, selected by `record.verifier["type"]`.

- `gsm8k`: the final number of the answer equals the reference number. The final number is the one after the last
  `####`, else inside the last `\\boxed{}`, else after the last "answer is"/"answer:", else the last number in the text.
  Numbers are compared as decimals, so `1,234` == `1234` and `18.0` == `18`.
- `choice`: the option letter picked by the answer ("Answer: B", "(B)", `\\boxed{B}`, or a bare "B") equals the
  reference letter.

Any other verifier type (IFEval constraints, rubrics, ...) has no checker here and :func:`check_answer` returns `None`.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from .records import Record

# A minus sign counts only when it does not follow a word character or another minus ("3-5" is a range, not -5).
_NUMBER = re.compile(r"(?:(?<![\w-])-)?\d+(?:,\d{3})*(?:\.\d+)?")
_BOXED = re.compile(r"\\boxed\s*\{((?:[^{}]|\{[^{}]*\})*)\}")
_ANSWER_MARKER = re.compile(r"answer\s*(?:is|:|=)", re.IGNORECASE)


def normalize_number(text: str) -> str | None:
    """Canonical string of a number: commas and `$` dropped, trailing zeros removed (`"1,234.50"` -> `"1234.5"`).

    Returns `None` when `text` is not a number.
    """
    cleaned = text.strip().replace(",", "").replace("$", "").strip()
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _first_number(text: str) -> str | None:
    match = _NUMBER.search(text.replace("$", ""))
    return normalize_number(match.group()) if match else None


def _last_number(text: str) -> str | None:
    matches = _NUMBER.findall(text.replace("$", ""))
    return normalize_number(matches[-1]) if matches else None


def extract_final_number(text: str) -> str | None:
    """Extract the final numeric answer of a GSM8K-style solution.

    Looks, in order, after the last `####`, inside the last `\\boxed{...}`, after the last "answer is" / "answer:",
    and finally at the last number anywhere in the text. Handles thousands separators, `$`, negative numbers and
    decimals; the result is normalised (`"$1,234.00"` -> `"1234"`).

    Args:
        text (`str`): A model answer or a reference solution.

    Returns:
        `str` or `None`: The normalised number, or `None` when the text holds no number.

    Example:
        ```python
        >>> extract_final_number("She pays 3 * 6 = 18 dollars.\\n#### 18")
        '18'
        >>> extract_final_number("The answer is 1,234.")
        '1234'
        ```
    """
    if not isinstance(text, str):
        return None
    if "####" in text:
        found = _first_number(text.rsplit("####", 1)[1])
        if found is not None:
            return found
    boxed = _BOXED.findall(text)
    if boxed:
        found = _last_number(boxed[-1])
        if found is not None:
            return found
    markers = list(_ANSWER_MARKER.finditer(text))
    if markers:
        found = _first_number(text[markers[-1].end() :])
        if found is not None:
            return found
    return _last_number(text)


def extract_choice(text: str, letters: str = "ABCD") -> str | None:
    """Extract the option letter chosen in a multiple-choice answer.

    Recognises, in order: `\\boxed{B}`, "answer is (B)" / "Answer: B" (last occurrence), a reply that is only the
    letter ("B", "(B)", "B."), and a parenthesised letter "(B)" (last occurrence).

    Args:
        text (`str`): The model answer.
        letters (`str`, *optional*, defaults to `"ABCD"`): The valid option letters.

    Returns:
        `str` or `None`: The upper-case letter, or `None` when no choice is recognisable.
    """
    if not isinstance(text, str):
        return None
    options = re.escape(letters)
    patterns = (
        rf"\\boxed\s*\{{\s*(?:\\text\s*\{{)?\s*\(?([{options}])\)?",
        rf"(?i:answer)\s*(?:is|:)?\s*[:\-]?\s*(?:option\s*)?[\*\(\[]*([{options}])(?![\w])",
    )
    for pattern in patterns:
        matches = re.findall(pattern, text)
        if matches:
            return matches[-1]
    bare = re.fullmatch(rf"\W*([{options}])\W*", text.strip())
    if bare:
        return bare.group(1)
    matches = re.findall(rf"\(([{options}])\)", text)
    return matches[-1] if matches else None


def _numbers_equal(predicted: str | None, reference: str | None) -> bool:
    if predicted is None or reference is None:
        return False
    return Decimal(predicted) == Decimal(reference)


def check_answer(record: Record, text: str) -> bool | None:
    """Check a model answer against a record's verifier.

    Args:
        record (`Record`): The example, with `verifier["type"]` in `{"gsm8k", "choice"}` to be checkable.
        text (`str`): The model answer.

    Returns:
        `bool` or `None`: Whether the answer is correct, or `None` when the record's source has no automatic checker
        (e.g. IFEval constraints, rubric-graded data).
    """
    kind = record.verifier.get("type")
    if kind == "gsm8k":
        return _numbers_equal(extract_final_number(text), normalize_number(str(record.verifier["answer"])))
    if kind == "choice":
        letters = "".join(record.verifier.get("options", {})) or "ABCD"
        return extract_choice(text, letters) == record.verifier["answer"]
    return None
