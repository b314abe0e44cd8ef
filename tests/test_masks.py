"""Turn masks from the chat template, checked token by token on every tiny family and on the real templates."""

import pytest
from conftest import real_tokenizer
from transformers import AutoTokenizer

from fic.chat import ChatTemplateError, render
from fic.masks import IGNORE_INDEX, check_train_on, chosen_turns, turn_masks
from fic.tiny import build_tokenizer

CONVERSATION = [
    {"role": "user", "content": "What is 12 times 3?"},
    {"role": "assistant", "content": "12 times 3 is 36."},
    {"role": "user", "content": "Why 36?"},
    {"role": "assistant", "content": "Because three twelves make 36."},
    {"role": "user", "content": "And 13 times 3?"},
]
# Text of each trained span (content + the turn's closing) under each family, written out by hand.
TINY_ENDS = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "norole": "<end_of_turn>"}
REAL_ENDS = {  # file stem: (user turn closing, assistant turn closing)
    "Qwen--Qwen2.5-7B-Instruct": ("<|im_end|>", "<|im_end|>"),
    "Qwen--Qwen3-0.6B": ("<|im_end|>", "<|im_end|>"),
    "Qwen--Qwen3.5-4B": ("<|im_end|>", "<|im_end|>"),
    "google--gemma-2-2b-it": ("<end_of_turn>", "<end_of_turn>"),
    "meta-llama--Llama-3.1-8B-Instruct": ("<|eot_id|>", "<|eot_id|>"),
    "meta-llama--Llama-3.2-3B-Instruct": ("<|eot_id|>", "<|eot_id|>"),
    "microsoft--Phi-3.5-mini-instruct": ("<|end|>", "<|end|>"),
    "mistralai--Mistral-Nemo-Instruct-2407": ("[/INST]", "</s>"),
    "openai--gpt-oss-20b": ("<|end|>", "<|end|>"),
    "zai-org--GLM-4.7-Flash": ("<|assistant|>", "<|user|>"),
}


def expected_spans(text: str, conversation: list[dict], turns: list[int], closing) -> list[tuple[int, int]]:
    """Character spans of the chosen turns found by plain string search, in order (independent of fic.masks)."""
    spans, pos = [], 0
    for i, message in enumerate(conversation):
        start = text.index(message["content"], pos)
        pos = start + len(message["content"])
        if i in turns:
            end_text = closing(message["role"])
            assert text.startswith(end_text, pos), (text[pos : pos + 20], end_text)
            spans.append((start, pos + len(end_text)))
    return spans


def assert_token_by_token(tok, conversation, train_on, closing):
    ids, labels = turn_masks(tok, conversation, train_on)
    text = render(tok, conversation)
    if closing(conversation[-1]["role"]) not in text[text.rindex(conversation[-1]["content"]) :]:
        text = render(tok, conversation, add_generation_prompt=True)  # GLM closes a user turn by opening the next
    assert tok(text, add_special_tokens=False)["input_ids"] == ids
    turns = chosen_turns(conversation, train_on)
    spans = expected_spans(text, conversation, turns, closing)
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    for k, ((s, e), label) in enumerate(zip(offsets, labels)):
        inside = any(a <= s and e <= b for a, b in spans)
        outside = all(e <= a or s >= b for a, b in spans)
        assert inside or outside, f"token {k} {text[s:e]!r} straddles a span boundary"
        assert label == (ids[k] if inside else IGNORE_INDEX), f"token {k} {text[s:e]!r}: label {label}"
    # and the trained tokens decode to exactly the chosen turns, closing included
    trained = "".join(text[s:e] for (s, e), label in zip(offsets, labels) if label != IGNORE_INDEX)
    assert trained == "".join(text[a:b] for a, b in spans)
    return [text[a:b] for a, b in spans]


@pytest.mark.parametrize("train_on", [["user_followups"], ["assistant"], ["user_followups", "assistant"]])
def test_tiny_families_token_by_token(tiny_family, train_on):
    family, path = tiny_family
    tok = AutoTokenizer.from_pretrained(path)
    end = TINY_ENDS[family]
    pieces = assert_token_by_token(tok, CONVERSATION, train_on, lambda role: end)
    want = {
        ("user_followups",): ["Why 36?", "And 13 times 3?"],
        ("assistant",): ["12 times 3 is 36.", "Because three twelves make 36."],
        ("user_followups", "assistant"): ["12 times 3 is 36.", "Why 36?", "Because three twelves make 36.",
                                          "And 13 times 3?"],
    }[tuple(train_on)]  # fmt: skip
    assert pieces == [w + end for w in want]


def test_first_user_turn_and_system_prompt_are_never_followups(tiny_family):
    family, path = tiny_family
    tok = AutoTokenizer.from_pretrained(path)
    ids, labels = turn_masks(tok, CONVERSATION[:1], ["user_followups"])
    assert all(label == IGNORE_INDEX for label in labels) and len(ids) > 5
    if family != "norole":
        convo = [{"role": "system", "content": "Be brief."}, *CONVERSATION[:3]]
        pieces = assert_token_by_token(tok, convo, ["user_followups"], lambda role: TINY_ENDS[family])
        assert pieces == ["Why 36?" + TINY_ENDS[family]]


def test_template_trims_content(tiny_family):
    """llama3 and norole trim message content; the span is what the template wrote, not the raw string."""
    family, path = tiny_family
    tok = AutoTokenizer.from_pretrained(path)
    convo = [CONVERSATION[0], CONVERSATION[1], {"role": "user", "content": "  Why 36?\n"}]
    ids, labels = turn_masks(tok, convo, ["user_followups"])
    trained = tok.decode([i for i, label in zip(ids, labels) if label != IGNORE_INDEX])
    written = "Why 36?" if family != "chatml" else "  Why 36?\n"
    assert trained == written + TINY_ENDS[family]


@pytest.mark.parametrize("stem", sorted(REAL_ENDS))
def test_real_templates_token_by_token(shared_data, stem):
    """Llama-3.1/3.2 have no {% generation %} tags (TRL's assistant masks fail there); spans come from rendering."""
    tok = real_tokenizer(shared_data, stem)
    user_end, assistant_end = REAL_ENDS[stem]

    def closing(role):
        return user_end if role == "user" else assistant_end

    pieces = assert_token_by_token(tok, CONVERSATION, ["user_followups", "assistant"], closing)
    assert pieces == [
        "12 times 3 is 36." + assistant_end, "Why 36?" + user_end,
        "Because three twelves make 36." + assistant_end, "And 13 times 3?" + user_end,
    ]  # fmt: skip


def test_bad_train_on_names_the_valid_choices():
    with pytest.raises(ValueError, match="train_on: invalid value .*user_followups, assistant"):
        check_train_on(["users"])
    with pytest.raises(ValueError, match="train_on"):
        check_train_on([])
    assert check_train_on("assistant") == ["assistant"]


def test_bad_messages_and_slow_tokenizer_fail_clearly(tiny_family):
    _, path = tiny_family
    tok = AutoTokenizer.from_pretrained(path)
    with pytest.raises(ValueError, match=r"messages\[1\]\.role"):
        turn_masks(tok, [CONVERSATION[0], {"role": "bot", "content": "x"}])

    class Slow:
        is_fast = False

    with pytest.raises(ValueError, match="fast tokenizer"):
        turn_masks(Slow(), CONVERSATION)


def test_template_that_drops_a_turn_fails_clearly():
    tok = build_tokenizer("chatml")
    # A template that never writes assistant messages: the assistant span cannot be located.
    tok.chat_template = "{% for m in messages %}{% if m['role'] == 'user' %}<|im_start|>user\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    with pytest.raises(ChatTemplateError, match=r"messages\[1\]"):
        turn_masks(tok, CONVERSATION, ["assistant"])
