"""vLLM backend: the offline `vllm.LLM` engine, used the way TRL's colocate mode uses it.

Prompts are tokenized here with `add_special_tokens=False` and passed as `{"prompt_token_ids": ids}` (vLLM would
otherwise add a second BOS to a rendered template). Each prompt gets its own `vllm.SamplingParams` whose seed is
`derive_seed(seed, i)`, so prompt `i` samples the same continuations whatever else is in the call; vLLM draws the
`n` samples of one request from that seed and shares their prefill. `skip_special_tokens=not keep_special_tokens`
keeps leaked role tags in the text; the stop string is excluded (`include_stop_str_in_output=False`, vLLM's default).

Several processes (`accelerate launch -m fic.cli probe --backend vllm ...`): one `vllm.LLM` cannot hold several
data-parallel copies (vLLM refuses `data_parallel_size > 1` there), so each process of the launch runs an engine of its
own on its `tensor_parallel_size` GPUs (`local_rank`: `CUDA_VISIBLE_DEVICES` narrowed to them before the engine's
process starts) and fic splits the items over the processes as for transformers.
"""

from __future__ import annotations

import logging
import os

from fic.generation.base import Backend, SamplingParams, cut_at_stop, derive_seed

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'fic[vllm]'"


def _import_vllm():
    try:
        import vllm  # optional (fic[vllm]) and heavy: only this backend needs it
    except ImportError as e:
        raise ImportError(
            f"The 'vllm' generation backend needs vLLM, which is not installed ({e}). Install it with "
            f"`{INSTALL_HINT}` (Linux + CUDA GPU), or use backend 'transformers' or 'openai'."
        ) from e
    return vllm


def device_slice(visible: list[str], local_rank: int, tensor_parallel_size: int) -> list[str]:
    """The GPUs of process `local_rank` among `visible`, `tensor_parallel_size` each; one line when too few."""
    first = local_rank * tensor_parallel_size
    if first + tensor_parallel_size > len(visible):
        raise ValueError(
            f"vllm backend: process {local_rank} needs GPUs {first}..{first + tensor_parallel_size - 1} "
            f"(tensor_parallel_size={tensor_parallel_size}) but {len(visible)} are visible; launch at most "
            f"{len(visible) // tensor_parallel_size} processes or lower --tensor-parallel-size"
        )
    return visible[first : first + tensor_parallel_size]


def take_devices(local_rank: int, tensor_parallel_size: int) -> None:
    """Narrow `CUDA_VISIBLE_DEVICES` to this process's GPUs, for the engine process vLLM starts (no-op on CPU)."""
    import torch

    if not torch.cuda.is_available():
        return
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = listed.split(",") if listed else [str(i) for i in range(torch.cuda.device_count())]
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(device_slice(visible, local_rank, tensor_parallel_size))


class VLLMBackend(Backend):
    """
    Generate with an in-process vLLM engine (GPU).

    Args:
        model: hub id or local path.
        local_rank: this process's place on its node under a launch of several processes: the engine takes GPUs
            `local_rank * tensor_parallel_size ...` of the visible ones (None: one process, vLLM's own choice).
        **engine_kwargs: passed to `vllm.LLM` (e.g. `gpu_memory_utilization=0.5`, `tensor_parallel_size=2`,
            `max_model_len=4096`, `dtype="bfloat16"`).
    """

    name = "vllm"

    def __init__(self, model: str, local_rank: int | None = None, **engine_kwargs):
        if engine_kwargs.get("data_parallel_size", 1) > 1:
            raise ValueError(
                f"data_parallel_size={engine_kwargs['data_parallel_size']}: one vllm.LLM holds one copy of the model; "
                "launch one process per copy instead (accelerate launch --num_processes N -m fic.cli ...)"
            )
        self._vllm = _import_vllm()
        if local_rank is not None:
            take_devices(local_rank, engine_kwargs.get("tensor_parallel_size", 1))
        self.model = model
        self.llm = self._vllm.LLM(model=model, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def max_context(self) -> int | None:
        return self.llm.llm_engine.model_config.max_model_len

    def sampling_params(self, params: SamplingParams, index: int, keep_special_tokens: bool = True):
        """The `vllm.SamplingParams` for prompt number `index`."""
        return self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            seed=derive_seed(params.seed, index) % 2**31,
            skip_special_tokens=not keep_special_tokens,
        )

    def _generate(self, prompts, params, progress, keep_special_tokens) -> list[list[str]]:
        inputs = [{"prompt_token_ids": self.tokenizer.encode(p, add_special_tokens=False)} for p in prompts]
        sampling = [self.sampling_params(params, i, keep_special_tokens) for i in range(len(prompts))]
        outputs = self.llm.generate(inputs, sampling_params=sampling, use_tqdm=progress)
        eos = self.tokenizer.eos_token if keep_special_tokens else None
        results = []
        for out in outputs:
            texts = []
            for completion in sorted(out.outputs, key=lambda c: c.index):
                text = cut_at_stop(completion.text, params.stop)
                # vLLM leaves the eos token out of the text; strip one if a tokenizer/version puts it in.
                if eos and text.endswith(eos):
                    text = text[: -len(eos)]
                texts.append(text)
            results.append(texts)
        return results
