"""Tiny offline causal LMs and tokenizers: the `tiny:` model names of the demo and the CPU recipes, and the tests'
and benchmarks. No downloads, ever.

`tiny_model(family)` builds a random-init Llama or Qwen2 model (well under 5M parameters) with a byte-level BPE
tokenizer trained here on a built-in corpus, attaches one of three chat-template families and saves both with
`save_pretrained`, so every code path loads them exactly as it would load a hub checkpoint. Builds are cached on
disk (`$FIC_CACHE`, default `~/.cache/fic`) by their settings and written atomically, so parallel test workers can
share them.

`tiny_task_model(family)` is the demo's base (`tiny:FAMILY:synthetic`): a tiny Llama with a word-level tokenizer
for the synthetic task family (`fic.data.synthetic`), trained with TRL's `SFTTrainer` on the single-turn views of
that task only (every full phrasing and the CONCAT form), so it answers them and has never seen a second user turn.
It is cached the same way.

Families:
    chatml: Qwen-style `<|im_start|>role\\n...<|im_end|>`, injects a default system prompt.
    llama3: Llama-3-style headers, BOS, and an injected `Today Date:` line in the system block.
    norole: Gemma-style, no system role (raises), `assistant` renamed `model`, `<end_of_turn>` closes turns.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from fic.data.synthetic import make_tasks, tokenized_single_turn_rows, vocabulary

CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set loop_messages = messages[1:] %}{%- else %}{%- set system_message = '' %}"
    "{%- set loop_messages = messages %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\nToday Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in loop_messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

NOROLE_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}"
)

FAMILIES: dict[str, dict] = {
    "chatml": {
        "template": CHATML_TEMPLATE,
        "special": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "extra": ["<|im_start|>"],
        "turn_end": ["<|im_end|>"],
    },
    "llama3": {
        "template": LLAMA3_TEMPLATE,
        "special": {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<|finetune_right_pad|>",
        },
        "extra": ["<|start_header_id|>", "<|end_header_id|>", "<|end_of_text|>"],
        "turn_end": ["<|eot_id|>"],
    },
    "norole": {
        "template": NOROLE_TEMPLATE,
        "special": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
        "extra": ["<start_of_turn>", "<end_of_turn>"],
        "turn_end": ["<end_of_turn>", "<eos>"],
    },
}

_WORDS = (
    "the a an of to and in is it that for on with as was he she they you we I be this are by at from or have not "
    "what which who when where why how can could would should will do does did may might must please tell me more "
    "about step first second then next finally so because if than there their them your our my answer question "
    "total sum difference product number numbers each per every many much cost costs price buy sells has had "
    "apples books cookies dollars hours minutes days weeks students friends boxes cars eggs pages miles "
    "plus minus times divided equals result left remaining more less twice half three four five six seven eight "
    "nine ten hundred thousand user assistant system model thanks thank okay yes no sure explain why example "
    "could you clarify mean meant wrong right correct check again shorter longer detail details summary "
    "translate code function write list name city country year color size brand rating category product item"
).split()


def _corpus() -> list[str]:
    """A deterministic corpus: words, sentences built from them, digits and arithmetic."""
    lines = [" ".join(_WORDS[i : i + 12]) for i in range(0, len(_WORDS), 6)]
    lines += [f"{a} + {b} = {a + b}. {a} * {b} = {a * b}. {b} - {a} = {b - a}." for a in range(13) for b in range(13)]
    lines += [w.capitalize() + " " + w + "? " + w + "." for w in _WORDS]
    lines += ["0123456789 .,;:!?()[]{}<>'\"-_/\\|@#$%^&*+=~` \n\t"] * 3
    return lines * 2


def build_tokenizer(family: str = "chatml", vocab_size: int = 512):
    """A byte-level BPE `PreTrainedTokenizerFast` with the family's special tokens and chat template."""
    # transformers, torch, datasets, trl: heavy (seconds); fic.modeling imports this module for its model names
    from transformers import PreTrainedTokenizerFast

    spec = _family(family)
    specials = list(dict.fromkeys([*spec["special"].values(), *spec["extra"]]))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **spec["special"], additional_special_tokens=spec["extra"])
    fast.chat_template = spec["template"]
    fast.padding_side = "left"
    return fast


def build_task_tokenizer(family: str = "chatml"):
    """A word-level `PreTrainedTokenizerFast` for the synthetic tasks, with the family's chat template and specials.

    Every word of the task family is one token (`fic.data.synthetic.vocabulary`), so a four-shard conversation is
    about 80 tokens, not 250 as with a small byte-level BPE; the words the template itself writes (role names, the
    default system prompt) are read off a rendering. Anything else decodes as `[UNK]`.
    """
    from transformers import PreTrainedTokenizerFast

    spec = _family(family)
    specials = list(dict.fromkeys([*spec["special"].values(), *spec["extra"], "[UNK]"]))
    words = set(vocabulary())
    probe = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")), **spec["special"]
    )
    probe.chat_template = spec["template"]
    convo = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "x"}]
    # The llama3 family writes today's date; pin it so renderings (and the vocabulary) do not change by the day.
    kwargs = {"date_string": "01 Jan 2025"} if family == "llama3" else {}
    text = probe.apply_chat_template(convo, tokenize=False, add_generation_prompt=True, **kwargs)
    for special in specials:
        text = text.replace(special, " ")
    words.update(re.findall(r"\w+|[^\w\s]+", text))
    vocab = {token: i for i, token in enumerate(specials + sorted(words - set(specials)))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", additional_special_tokens=list(spec["extra"]), **spec["special"]
    )
    tokenizer.chat_template = spec["template"]
    tokenizer.padding_side = "left"
    return tokenizer


def resolve_tiny_name(name: str) -> str:
    """The folder of the tiny model `name` names: `tiny:FAMILY` or `tiny:FAMILY:ARCH` -> `tiny_model(FAMILY, ARCH)`;
    `tiny:FAMILY:synthetic` -> `tiny_task_model(FAMILY)`, the demo's base trained on the synthetic task."""
    from fic.errors import ModelLoadError

    parts = name.split(":")
    arch_ok = len(parts) == 2 or (len(parts) == 3 and parts[2] in ("llama", "qwen2", "qwen3_5", "synthetic"))
    if parts[0] != "tiny" or not arch_ok or parts[1] not in FAMILIES:
        raise ModelLoadError(
            f"model_name_or_path: {name!r} is not a tiny model name; use tiny:FAMILY or tiny:FAMILY:ARCH with FAMILY "
            f"in {', '.join(FAMILIES)} and ARCH in llama, qwen2, qwen3_5, or synthetic for the base trained on the "
            "synthetic task (e.g. tiny:chatml, tiny:chatml:synthetic)"
        )
    if parts[2:] == ["synthetic"]:
        return tiny_task_model(parts[1])
    return tiny_model(parts[1], *parts[2:])


def _family(family: str) -> dict:
    if family not in FAMILIES:
        raise ValueError(f"family: unknown chat-template family {family!r}; valid: {', '.join(FAMILIES)}")
    return FAMILIES[family]


def _cache_root() -> Path:
    return Path(os.environ.get("FIC_CACHE", Path.home() / ".cache" / "fic"))


def tiny_model(
    family: str = "chatml",
    arch: str = "llama",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 128,
    vocab_size: int = 512,
    max_position_embeddings: int = 2048,
    seed: int = 0,
    cache_dir: str | Path | None = None,
) -> str:
    """Build (once) and return the directory of a tiny random-init causal LM with its tokenizer.

    Args:
        family: chat-template family, one of `chatml`, `llama3`, `norole`.
        arch: `llama` (LlamaForCausalLM), `qwen2` (Qwen2ForCausalLM) or `qwen3_5` (Qwen3.5's text model: gated
            delta-net linear-attention layers with a full-attention layer every fourth, as Qwen3.5-2B).
        hidden_size, num_layers, num_heads, intermediate_size: model shape (defaults give ~0.15M parameters).
        vocab_size: BPE vocabulary size (special tokens included).
        seed: torch seed for the random initialisation.
        cache_dir: where builds are kept (default `$FIC_CACHE/tiny` or `~/.cache/fic/tiny`).
    """
    settings = dict(
        family=family, arch=arch, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        intermediate_size=intermediate_size, vocab_size=vocab_size, max_position_embeddings=max_position_embeddings,
        seed=seed, version=1,
    )  # fmt: skip
    _family(family)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(cache_dir) if cache_dir else _cache_root() / "tiny"
    out = root / f"{family}-{arch}-{key}"
    if _complete(out):
        _record_architecture(out, arch)
        return str(out)
    if out.exists():  # an incomplete folder (an older build written by a non-zero rank): build it again
        shutil.rmtree(out, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
    try:
        _build(tmp, **{k: v for k, v in settings.items() if k != "version"})
        try:
            os.rename(tmp, out)
        except OSError:  # another process finished the same build first
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return str(out)


def _build(out: Path, family, arch, hidden_size, num_layers, num_heads, intermediate_size, vocab_size,
           max_position_embeddings, seed) -> None:  # fmt: skip
    tokenizer = build_tokenizer(family, vocab_size=vocab_size)
    model = random_model(tokenizer, family, arch, hidden_size, num_layers, num_heads, intermediate_size,
                         max_position_embeddings, seed)  # fmt: skip
    cls = type(model)
    # Written directly, not with `save_pretrained`: under torch.distributed, transformers writes weights on rank 0
    # only, and each rank of a multi-process run may be the one that builds the tiny model.
    from safetensors.torch import save_file

    model.config.architectures = [cls.__name__]  # what save_pretrained records (TRL builds copies from it)
    model.config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, str(out / _WEIGHTS), metadata={"format": "pt"}
    )
    tokenizer.save_pretrained(out)
    if not _complete(out):
        raise RuntimeError(f"tiny model build in {out} is incomplete")


def random_model(
    tokenizer,
    family: str = "chatml",
    arch: str = "llama",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 128,
    max_position_embeddings: int = 2048,
    seed: int = 0,
):
    """A random-init causal LM (seeded) sized to `tokenizer`, whose generation ends at the family's turn end."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if arch == "llama":
        config, cls = LlamaConfig(**common), LlamaForCausalLM
    elif arch == "qwen2":
        config, cls = Qwen2Config(**common), Qwen2ForCausalLM
    elif arch == "qwen3_5":
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

        head_dim = hidden_size // num_heads
        config = Qwen3_5TextConfig(
            **common, head_dim=head_dim, linear_num_key_heads=num_heads, linear_num_value_heads=num_heads,
            linear_key_head_dim=head_dim, linear_value_head_dim=head_dim,
        )  # fmt: skip
        cls = AutoModelForCausalLM.from_config
    else:
        raise ValueError(f"arch: unknown architecture {arch!r}; valid: llama, qwen2, qwen3_5")
    torch.manual_seed(seed)
    model = cls(config)
    end_ids = [tokenizer.convert_tokens_to_ids(t) for t in _family(family)["turn_end"]]
    model.generation_config = GenerationConfig(
        eos_token_id=end_ids, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
    )
    return model


def tiny_task_model(
    family: str = "chatml",
    task_steps: int = 1,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 256,
    base_tasks: int = 4000,
    base_steps: int = 600,
    base_batch_size: int = 64,
    base_learning_rate: float = 3e-3,
    seed: int = 0,
    num_threads: int = 2,
    cache_dir: str | Path | None = None,
) -> str:
    """Train (once) and return the directory of the tiny synthetic-task base (`tiny:FAMILY:synthetic`).

    A `random_model` Llama with `build_task_tokenizer` is trained with TRL's `SFTTrainer` (completion-only loss) on
    `base_tasks` train-split tasks of `fic.data.synthetic` with `task_steps` update steps, each in every single-turn
    phrasing, for `base_steps` steps; `num_threads` torch CPU threads. Cached under `cache_dir` (default
    `$FIC_CACHE/tiny_synthetic`) by all of these settings.
    """
    import torch

    settings = dict(
        family=family, task_steps=task_steps, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        intermediate_size=intermediate_size, base_tasks=base_tasks, base_steps=base_steps,
        base_batch_size=base_batch_size, base_learning_rate=base_learning_rate, seed=seed, version=1,
    )  # fmt: skip
    _family(family)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(cache_dir) if cache_dir else _cache_root() / "tiny_synthetic"
    out = root / f"base-{family}-{key}"
    if (out / "config.json").exists():
        return str(out)
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    tokenizer = build_task_tokenizer(family)
    model = random_model(tokenizer, family, "llama", hidden_size, num_layers, num_heads, intermediate_size,
                         max_position_embeddings=512, seed=seed)  # fmt: skip
    tasks = make_tasks(base_tasks, seed=seed, split="train", steps=task_steps)
    dataset = Dataset.from_list(tokenized_single_turn_rows(tokenizer, tasks))
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".build-"))
    try:
        args = SFTConfig(
            output_dir=str(tmp / "trainer"),
            max_steps=base_steps,
            per_device_train_batch_size=base_batch_size,
            learning_rate=base_learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=min(50, base_steps // 10),
            weight_decay=0.0,
            max_grad_norm=1.0,
            logging_steps=50,
            save_strategy="no",
            report_to="none",
            bf16=False,
            gradient_checkpointing=False,
            completion_only_loss=True,
            seed=seed,
            dataloader_num_workers=0,
            use_cpu=not torch.cuda.is_available(),
        )
        SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer).train()
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        try:
            os.rename(tmp / "model", out)
        except OSError:  # another process cached the same base first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        torch.set_num_threads(threads)
    return str(out)


_WEIGHTS = "model.safetensors"
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def _record_architecture(out: Path, arch: str) -> None:
    """Builds written before the config recorded its architecture get it (`trl.create_model_from_path` reads it)."""
    path = out / "config.json"
    config = json.loads(path.read_text())
    if config.get("architectures") or arch not in _ARCHITECTURES:
        return
    config["architectures"] = [_ARCHITECTURES[arch]]
    tmp = path.with_name(f".config.{os.getpid()}.json")
    tmp.write_text(json.dumps(config, indent=2, sort_keys=True))
    os.replace(tmp, path)


def _complete(out: Path) -> bool:
    return all((out / name).is_file() for name in ("config.json", "tokenizer_config.json", _WEIGHTS))


def num_parameters(path: str) -> int:
    """Parameter count of a saved model (for tests of the size promise)."""
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters())
