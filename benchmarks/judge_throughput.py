"""Judge throughput: the heuristic judge against its own sentence encoder, and the LLM judge's concurrency.

Heuristic judge. The judge is bound by all-MiniLM-L6-v2, so both are timed on the same cases, interleaved in one
process after the encoder is loaded and warmed up (model load excluded):

* `cases_per_s`: `HeuristicJudge().judge(cases)` on the whole set (rules, one batched encode, embedding rules).
* `encoder_bound_cases_per_s`: the encoder alone replaying exactly the encode calls the judge makes on those cases
  (recorded: the same distinct texts, batch size and `max_seq_length`), i.e. the encoder's batched throughput
  divided by the encodings a case needs (`encodings_per_case`).
* `efficiency` = cases_per_s / encoder_bound_cases_per_s (target >= 0.8), and `cases_per_s` >= 50 on 2 cores.
* `learned_cases_per_s`: the `learned` judge (the same rules plus the classifier of `fic.judges.classifier`, which
  needs the encoder's similarities for every case the rules leave open) on the same cases, timed in the same turns
  (target >= 50 on 2 cores); `learned_over_rules` = its time / the rules judge's time.
* `contrast_cases_per_s`: the `learned` judge in its contrastive form (`make_judge("learned", contrast=True)`: the
  turns it calls genuine are judged again after another context's answer), same cases, same turns (target >= 50 on
  2 cores); `contrast_over_learned` = its time / the plain `learned` judge's.
* `strict_contrast_cases_per_s`: the judge of the collab filter and the follow-up RL reward, the `strict` judge in
  its contrastive form (`make_judge("strict", contrast=True)`: its classifier also reads the turn's similarity to
  fixed unrelated answers), same cases, same turns (target >= 50 on 2 cores).

Contexts are the 30 MT-Bench first questions with their GPT-4 reference answers (question + answer cut to at most
512 encoder tokens); each gets `samples` user turns, as a probe drawing several samples per context would: the real
second turn, and first questions of other items (an unrelated request, which the rules cannot settle and the
encoder must: `encoded_share` is the share of cases that needed it). Without ../shared/data a built-in set stands
in.

LLM judge. `LLMJudge` against the local mock OpenAI server (tests/mock_openai_server.py), run in its own process,
answering every request after a fixed latency: `concurrency_speedup` = time with `concurrency=1` / time with
`concurrency=C` (target close to C). `llm_overhead_ms_per_request` is what a serial request costs beyond the latency
(connection, both sides' CPU time, the machine's scheduling), `llm_client_cpu_ms_per_request` the judge's own CPU
time per request.

    python benchmarks/judge_throughput.py [--size smoke|cpu|gpu] [--repeats 5]
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

NAME = "judge_throughput"

SIZES = {
    "smoke": dict(contexts=4, samples=2, llm_cases=16, latency=0.05, concurrency=8, llm_repeats=1),
    "cpu": dict(contexts=30, samples=4, llm_cases=64, latency=0.1, concurrency=8, llm_repeats=2),
    "gpu": dict(contexts=30, samples=8, llm_cases=256, latency=0.1, concurrency=32, llm_repeats=2),
}
MAX_CONTEXT_TOKENS = 512
_FALLBACK = [
    (
        "How do I make a sourdough starter from scratch?",
        "Mix equal weights of flour and water in a jar, cover it loosely and keep it warm. Every day discard half and "
        "feed it fresh flour and water. After five to seven days it should double within hours of feeding and smell "
        "pleasantly sour; then it is ready to bake with.",
        "How do I keep it alive if I only bake once a week?",
    ),
    (
        "What is the difference between a list and a tuple in Python?",
        "Lists are mutable: you can append, remove and change items. Tuples are immutable, so they can be used as "
        "dictionary keys and signal that the data should not change. Tuples are also slightly faster to create.",
        "Can you show me an example where using a list as a key fails?",
    ),
    (
        "Plan a three-day trip to Lisbon for a family with two children.",
        "Day one: Belem tower, the monastery and pastries at the famous bakery. Day two: the Oceanarium and the park "
        "of nations, with a cable car ride. Day three: tram 28 through Alfama and the castle, then sunset at a "
        "viewpoint.",
        "Which of these places are stroller friendly?",
    ),
]


def load_contexts(limit: int) -> tuple[list[tuple[str, str, str]], str]:
    """(question, answer, real second turn) triples: MT-Bench with GPT-4 references, or the built-in stand-in."""
    mt = common.shared_data_dir() / "mt_bench"
    if not (mt / "reference_answer_gpt-4.jsonl").exists():
        return (_FALLBACK * (limit // len(_FALLBACK) + 1))[:limit], "built-in"
    questions = {}
    for line in (mt / "question.jsonl").read_text().splitlines():
        row = json.loads(line)
        questions[row["question_id"]] = row["turns"]
    out = []
    for line in (mt / "reference_answer_gpt-4.jsonl").read_text().splitlines()[:limit]:
        ref = json.loads(line)
        q1, q2 = questions[ref["question_id"]]
        out.append((q1, ref["choices"][0]["turns"][0], q2))
    return out, "mt_bench (GPT-4 reference answers)"


def clip_context(tokenizer, question: str, answer: str) -> str:
    """Cut the answer (at a word) so that question + answer fit in MAX_CONTEXT_TOKENS encoder tokens."""
    budget = MAX_CONTEXT_TOKENS - len(tokenizer.tokenize(question))
    words = answer.split(" ")
    while len(tokenizer.tokenize(" ".join(words))) > budget:
        words = words[: int(len(words) * 0.9)]
    return " ".join(words)


def build_cases(contexts, samples: int, tokenizer):
    """For each context: the real second turn, then `samples - 1` first questions of the next contexts.

    The latter are what a probe sees when the model drafts an unrelated request instead of a follow-up; the rules
    cannot settle them, so they cost the judge an encoding of the turn, the question and the answer.
    """
    from fic.judges import Case

    cases = []
    for k, (question, answer, second) in enumerate(contexts):
        answer = clip_context(tokenizer, question, answer)
        messages = [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        others = [contexts[(k + d) % len(contexts)][0] for d in range(1, samples)]
        cases += [Case(messages, turn) for turn in [second, *others]]
    return cases


def record_encodes(encoder, fn) -> list[tuple[list[str], dict]]:
    """Run `fn()` with `encoder.encode` wrapped to record every call's texts and keyword arguments."""
    calls = []
    original = encoder.encode

    def encode(sentences, *a, **kw):
        calls.append((list(sentences), dict(kw)))
        return original(sentences, *a, **kw)

    encoder.encode = encode
    try:
        fn()
    finally:
        del encoder.encode  # back to the class's method
    return calls


def heuristic_figures(args, s) -> tuple[dict, dict]:
    from fic.judges import HeuristicJudge, make_judge
    from fic.judges.heuristic import HeuristicJudgeConfig, get_encoder

    encoder = get_encoder()  # load once, outside every timing
    config = HeuristicJudgeConfig()
    judge = HeuristicJudge(config)
    contexts, source = load_contexts(s["contexts"])
    cases = build_cases(contexts, s["samples"], encoder.tokenizer)

    # The encoder-bound side replays exactly the encode calls the judge makes on these cases (same texts, same
    # arguments; the judge sets encoder.max_seq_length itself, and it stays set).
    verdicts: list = []
    calls = record_encodes(encoder, lambda: verdicts.extend(judge.judge(cases)))
    if not calls:
        raise RuntimeError(
            "the heuristic judge encoded nothing on these cases; the benchmark needs cases that reach it"
        )
    encoded_cases = sum(("cos_q" in v.extra or "cos_a" in v.extra) for v in verdicts)

    learned = make_judge("learned")
    learned_verdicts = learned.judge(cases)  # loads the classifier file outside the timing
    # The training form (collab filter, follow-up RL reward): the turns called genuine are judged again after a foil.
    contrast = make_judge("learned", contrast=True)
    contrast_verdicts = contrast.judge(cases)
    strict = make_judge("strict", contrast=True)
    strict_verdicts = strict.judge(cases)

    def run_judge():
        judge.judge(cases)

    def run_learned():
        learned.judge(cases)

    def run_contrast():
        contrast.judge(cases)

    def run_strict():
        strict.judge(cases)

    def run_encoder():
        for texts, kw in calls:
            encoder.encode(texts, **kw)

    cpu: dict[str, list[float]] = {}
    times = common.interleaved_times(
        {"judge": run_judge, "encoder": run_encoder, "learned": run_learned, "contrast": run_contrast,
         "strict_contrast": run_strict}, args.repeats,
        max(1, args.warmup),
        "cpu", cpu,
    )  # fmt: skip
    t_judge, t_encoder = common.median(times["judge"]), common.median(times["encoder"])
    t_learned, t_contrast = common.median(times["learned"]), common.median(times["contrast"])
    n_texts = sum(len(texts) for texts, _ in calls)
    cases_per_s = len(cases) / t_judge
    bound = len(cases) / t_encoder
    figures = {
        "cases_per_s": cases_per_s,
        "encoder_bound_cases_per_s": bound,
        "efficiency": cases_per_s / bound,
        "encodings_per_case": n_texts / len(cases),
        "encoder_texts_per_s": n_texts / t_encoder,
        "encoded_share": encoded_cases / len(cases),
        # How many cores the judge really had (at most --threads): below it, other processes took the rest.
        "cores_used": common.median(cpu["judge"]) / t_judge,
        "cases_per_cpu_s": len(cases) / common.median(cpu["judge"]),
        "learned_cases_per_s": len(cases) / t_learned,
        "learned_over_rules": t_learned / t_judge,
        "contrast_cases_per_s": len(cases) / t_contrast,
        "contrast_over_learned": t_contrast / t_learned,
        "strict_contrast_cases_per_s": len(cases) / common.median(times["strict_contrast"]),
    }
    settings = dict(
        cases=len(cases), contexts=len(contexts), samples_per_context=s["samples"], data=source,
        max_context_tokens=MAX_CONTEXT_TOKENS, encoder_max_seq_length=encoder.max_seq_length,
        encoder_batch_size=config.batch_size, encode_calls=len(calls), labels=dict(Counter(v.label for v in verdicts)),
        seconds_judge=times["judge"], seconds_encoder=times["encoder"], seconds_learned=times["learned"],
        learned_labels=dict(Counter(v.label for v in learned_verdicts)),
        seconds_contrast=times["contrast"], contrast_labels=dict(Counter(v.label for v in contrast_verdicts)),
        seconds_strict_contrast=times["strict_contrast"],
        strict_contrast_labels=dict(Counter(v.label for v in strict_verdicts)),
    )  # fmt: skip
    return figures, settings


REPLY = json.dumps({"label": "genuine_followup", "genuine": True, "confidence": 0.9, "rationale": "builds on it"})


def serve_mock(latency: float) -> None:
    """Child process: serve the mock endpoint, print its URL, wait for stdin to close, print the most in flight."""
    common.add_tests_to_path()
    import mock_openai_server as mock

    class Server(mock.ThreadingHTTPServer):
        # socketserver's default listen backlog is 5: more simultaneous connections than that get their SYN dropped
        # and retried a second later, which would be measured as the judge's fault.
        request_queue_size = 256

    mock.ThreadingHTTPServer = Server
    with mock.MockOpenAIServer(chat_reply=REPLY, latency=latency) as server:
        print(server.url, flush=True)
        sys.stdin.read()
        print(json.dumps({"max_in_flight": server.max_in_flight}), flush=True)


def llm_figures(args, s) -> tuple[dict, dict]:
    from fic.judges import Case, LLMJudge

    messages = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4."}]
    cases = [Case(messages, f"Why is that, for case {i}?") for i in range(s["llm_cases"])]
    # The endpoint runs in its own process, as a real one would: in this one it would share the GIL with the client.
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", f"mock:{s['latency']}", "--results-dir", ""]
    server = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=common.REPO_ROOT)
    try:
        url = server.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"the mock endpoint did not start (said {url!r})")
        serial = LLMJudge(url, "mock-judge", concurrency=1, max_retries=0)
        parallel = LLMJudge(url, "mock-judge", concurrency=s["concurrency"], max_retries=0)
        verdicts = {}

        def run(judge, key):
            def go():
                verdicts[key] = judge.judge(cases)

            return go

        cpu: dict[str, list[float]] = {}
        times = common.interleaved_times(
            {"serial": run(serial, "serial"), "concurrent": run(parallel, "concurrent")},
            s["llm_repeats"],
            1,
            "cpu",
            cpu,
        )
        server.stdin.close()
        max_in_flight = json.loads(server.stdout.readline())["max_in_flight"]
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    errors = sum(v.is_error for vs in verdicts.values() for v in vs)
    if errors:
        raise RuntimeError(f"the LLM judge returned {errors} judge_error verdicts against the mock endpoint")
    t_serial, t_concurrent = common.median(times["serial"]), common.median(times["concurrent"])
    figures = {
        "concurrency_speedup": t_serial / t_concurrent,
        "concurrency_limit": s["concurrency"],
        "llm_cases_per_s": len(cases) / t_concurrent,
        "llm_serial_cases_per_s": len(cases) / t_serial,
        "llm_overhead_ms_per_request": 1000 * (t_serial / len(cases) - s["latency"]),
        "llm_client_cpu_ms_per_request": 1000 * common.median(cpu["concurrent"]) / len(cases),
    }
    settings = dict(
        llm_cases=len(cases), mock_latency_s=s["latency"], concurrency=s["concurrency"], max_in_flight=max_in_flight,
        seconds_llm_serial=times["serial"], seconds_llm_concurrent=times["concurrent"],
    )  # fmt: skip
    return figures, settings


def main(argv: list[str] | None = None) -> dict:
    p = common.parser(__doc__, default_repeats=5)
    known, _ = p.parse_known_args(argv)
    if known.worker and known.worker.startswith("mock:"):
        return serve_mock(float(known.worker.split(":", 1)[1]))
    args = common.parse(p, argv)
    figures, settings = heuristic_figures(args, SIZES[args.size])
    llm, llm_settings = llm_figures(args, SIZES[args.size])
    return common.emit(NAME, {**figures, **llm}, args, **settings, **llm_settings)


if __name__ == "__main__":
    main()
