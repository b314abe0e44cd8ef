"""Role-header prefixes, turn ends and views, on the tiny template families and on ten real chat templates."""

import pytest
from conftest import real_tokenizer
from transformers import AutoTokenizer

from fic import chat
from fic.tiny import build_tokenizer

CONTEXT = [
    {"role": "user", "content": "What is 12 times 3?"},
    {"role": "assistant", "content": "12 times 3 is 36."},
]
TINY_USER_HEADER = {
    "chatml": "<|im_start|>user\n",
    "llama3": "<|start_header_id|>user<|end_header_id|>\n\n",
    "norole": "<start_of_turn>user\n",
}


def test_tiny_prefix_ends_with_one_new_user_header(tiny_family):
    family, path = tiny_family
    tok = AutoTokenizer.from_pretrained(path)
    prefix = chat.role_prefix(tok, CONTEXT)
    header = TINY_USER_HEADER[family]
    assert prefix.endswith(header)
    # one header per user message in the context, plus the new one
    assert prefix.count(header) == 2
    assert prefix.rstrip().endswith(header.rstrip())
    assert "12 times 3 is 36." in prefix
    # the prefix tokenises and decodes back to itself, and BOS is never doubled
    ids = tok(prefix, add_special_tokens=False).input_ids
    assert tok.decode(ids) == prefix
    if tok.bos_token:
        assert prefix.count(tok.bos_token) == 1


def test_default_system_prompt_is_kept():
    tok = build_tokenizer("chatml")
    prefix = chat.role_prefix(tok, CONTEXT)
    assert prefix.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>")


def test_injected_date_line_is_kept():
    tok = build_tokenizer("llama3")
    prefix = chat.role_prefix(tok, CONTEXT)
    assert "Today Date: " in prefix and prefix.startswith("<|begin_of_text|>")


def test_renamed_assistant_role_and_missing_system_role():
    tok = build_tokenizer("norole")
    assert chat.role_prefix(tok, [CONTEXT[0]], role="assistant").endswith("<start_of_turn>model\n")
    tok.name_or_path = "tiny-norole"
    with pytest.raises(chat.ChatTemplateError, match="tiny-norole"):
        chat.role_prefix(tok, [{"role": "system", "content": "Be brief."}, *CONTEXT])


def test_inconsistent_template_raises_naming_tokenizer():
    tok = build_tokenizer("chatml")
    tok.name_or_path = "weird-template"
    # A template whose text depends on the content of the new turn cannot give one prefix.
    tok.chat_template = (
        "{% for m in messages %}<{{ m['content'] | length }}>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    with pytest.raises(chat.ChatTemplateError, match="weird-template"):
        chat.role_prefix(tok, CONTEXT)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{{ m['content'] }}{% endfor %}"
    with pytest.raises(chat.ChatTemplateError, match="verbatim"):
        chat.role_prefix(tok, CONTEXT)


def test_template_that_writes_the_role_after_the_content_raises_naming_tokenizer():
    """Cut at the sentinel, such a template gives a prefix with no user header (the role comes after the content)."""
    tok = build_tokenizer("chatml")
    tok.name_or_path = "role-after-content"
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}\n<|{{ m['role'] }}|>\n{% endfor %}"
    with pytest.raises(chat.ChatTemplateError, match="'role-after-content' writes no user header"):
        chat.role_prefix(tok, CONTEXT)
    with pytest.raises(chat.ChatTemplateError, match="role-after-content"):
        chat.role_prefix(tok, CONTEXT[:1], role="assistant")


def test_missing_template_raises():
    tok = build_tokenizer("chatml")
    tok.chat_template = None
    with pytest.raises(chat.ChatTemplateError, match="no chat template"):
        chat.role_prefix(tok, CONTEXT)


def test_turn_end_strings_tiny():
    assert chat.turn_end_strings(build_tokenizer("chatml")) == ["<|im_end|>"]
    assert chat.turn_end_strings(build_tokenizer("llama3")) == ["<|eot_id|>"]
    assert chat.turn_end_strings(build_tokenizer("norole")) == ["<end_of_turn>", "<eos>"]


REAL = {
    # file stem: (user header the prefix ends with, user-turn end strings)
    "Qwen--Qwen2.5-7B-Instruct": ("<|im_start|>user\n", ["<|im_end|>"]),
    "Qwen--Qwen3-0.6B": ("<|im_start|>user\n", ["<|im_end|>"]),
    "Qwen--Qwen3.5-4B": ("<|im_start|>user\n", ["<|im_end|>"]),
    "google--gemma-2-2b-it": ("<start_of_turn>user\n", ["<end_of_turn>", "<eos>"]),
    "meta-llama--Llama-3.1-8B-Instruct": ("<|start_header_id|>user<|end_header_id|>\n\n", ["<|eot_id|>"]),
    "meta-llama--Llama-3.2-3B-Instruct": ("<|start_header_id|>user<|end_header_id|>\n\n", ["<|eot_id|>"]),
    "microsoft--Phi-3.5-mini-instruct": ("<|user|>\n", ["<|end|>", "<|endoftext|>"]),
    "mistralai--Mistral-Nemo-Instruct-2407": ("</s>[INST]", ["[/INST]", "</s>"]),
    "openai--gpt-oss-20b": ("<|start|>user<|message|>", ["<|end|>", "<|return|>"]),
    "zai-org--GLM-4.7-Flash": ("<|user|>", ["<|assistant|>", "<|endoftext|>"]),
}


@pytest.mark.parametrize("stem", sorted(REAL))
def test_real_templates(shared_data, stem):
    tok = real_tokenizer(shared_data, stem)
    header, ends = REAL[stem]
    prefix = chat.role_prefix(tok, CONTEXT)
    assert prefix.endswith(header)
    assert "12 times 3 is 36." in prefix
    assert chat.turn_end_strings(tok) == ends
    # a generated user turn closed with the first end string renders like a real user message
    closed = chat.render(tok, [*CONTEXT, {"role": "user", "content": "Why 36?"}])
    assert (prefix + "Why 36?" + ends[0]) in closed or stem == "zai-org--GLM-4.7-Flash"


def test_reasoning_of_earlier_turns_is_dropped(shared_data):
    tok = real_tokenizer(shared_data, "Qwen--Qwen3-0.6B")
    context = [CONTEXT[0], {"role": "assistant", "content": "<think>\n12*3=36\n</think>\n\n12 times 3 is 36."}]
    prefix = chat.role_prefix(tok, context)
    assert "12*3=36" not in prefix and prefix.endswith("<|im_start|>user\n")


def test_system_less_real_template_fails_clearly(shared_data):
    tok = real_tokenizer(shared_data, "google--gemma-2-2b-it")
    with pytest.raises(chat.ChatTemplateError, match="gemma-2-2b-it.*System role not supported"):
        chat.role_prefix(tok, [{"role": "system", "content": "Be brief."}, *CONTEXT])


def test_views():
    shards = ["What is the total cost?", "Apples cost 3 dollars.", "Tom buys 4 apples."]
    assert chat.full_view("Tom buys 4 apples at 3 dollars. Total?") == [
        {"role": "user", "content": "Tom buys 4 apples at 3 dollars. Total?"}
    ]
    concat = chat.concat_view(shards)
    assert len(concat) == 1 and all(s in concat[0]["content"] for s in shards)
    sharded = chat.sharded_view(shards, ["Sure.", "Okay."])
    assert [m["role"] for m in sharded] == ["user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in sharded if m["role"] == "user"] == shards
    with pytest.raises(ValueError, match="assistant_turns"):
        chat.sharded_view(shards, ["Sure."])


def test_validate_messages_names_the_field():
    with pytest.raises(ValueError, match=r"messages\[1\]\.role: unknown role 'bot'"):
        chat.validate_messages([{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}])
    with pytest.raises(ValueError, match=r"messages\[0\]\.content: expected a string"):
        chat.validate_messages([{"role": "user", "content": None}])
    with pytest.raises(ValueError, match="empty user message"):
        chat.validate_messages([{"role": "user", "content": "  "}])
