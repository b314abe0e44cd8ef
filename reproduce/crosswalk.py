"""The crosswalk at the top of the report: each seed paper's table or figure -> the fic table that stands for it ->
what differs.

`CROSSWALK` is the one place that says which of the report's tables answers which item of which paper. The paper's
own number is in `item` (fic's probe tables carry their own numbers, which do not match the paper's: fic's "Table 1"
is the probe paper's Table 4 and fic's "Table 4" its Table 1). `fic_table` is a piece of the caption of the fic
table (as the part module writes it; `tests/test_reproduce.py` checks that it is there), or None where fic has no
such table yet. `differs` says what is not as in the paper: model, sizes, data, judge, and what is missing. Papers
whose table numbers are not recorded in this repository name the result instead of a number.
"""

from __future__ import annotations

MODEL = "SmolLM2-135M-Instruct on 2 CPU cores"
JUDGE = "the offline `learned` judge (rules + a classifier fitted on labels by AI-agent annotators), not an LLM judge"

CROSSWALK = (
    {
        "paper": "probe paper",
        "item": "Table 1",
        "shows": "controls: truncate the answer, append a generic question; base and perturbed rate, % changed",
        "part": "probe",
        "fic_table": "Table 4: controls",
        "differs": f"{MODEL}; 30 items per dataset outside the judge's fit, one turn per item; controls at T=0 and "
        f"T=1.0 only; judged by {JUDGE}; adds the paired difference from none and the seed floor of % changed "
        "(the share of turns another seed changes by itself)",
    },
    {
        "paper": "probe paper",
        "item": "Table 2",
        "shows": "collaboration post-training (collab SFT, follow-up RL) on held-out HealthBench, Coval and IFBench",
        "part": "collab",
        "fic_table": "Held-out genuine follow-up rate",
        "differs": f"{MODEL} instead of Qwen3.5-2B; 9 held-out HealthBench multi-turn contexts; 20 held-out MT-Bench "
        "questions stand in for Coval (openai/coval is not available offline); no IFBench column; SFT data: real "
        "MT-Bench second turns plus template follow-ups kept by the same judge that scores the result; one seed",
    },
    {
        "paper": "probe paper",
        "item": "Tables 3 and 5",
        "shows": "task accuracy beside the follow-up rate",
        "part": "probe",
        "fic_table": "Table 1: genuine follow-up rate",
        "differs": "a column of fic's Table 1 (and of the collab table), not a table of its own; accuracy only where "
        "a checker exists (GSM8K, 30 items in the probe, 20 in collab); the other datasets show n/a",
    },
    {
        "paper": "probe paper",
        "item": "Table 4",
        "shows": "genuine follow-up rate by temperature",
        "part": "probe",
        "fic_table": "Table 1: genuine follow-up rate",
        "differs": f"{MODEL}; GSM8K, MT-Bench, HealthBench, IFEval (no IFBench); T in 0, 0.3, 0.7, 1.0 with one turn "
        "per item and temperature (n=30 per cell); the T=1.0 - T=0 paired difference is a separate table",
    },
    {
        "paper": "probe paper",
        "item": "Figures 1 and 4",
        "shows": "follow-up rate against temperature, drawn",
        "part": "probe",
        "fic_table": None,
        "differs": "not drawn: the numbers are in fic's Table 1, no figure is in the report",
    },
    {
        "paper": "probe paper",
        "item": "Table 6",
        "shows": "failure-mode distribution",
        "part": "probe",
        "fic_table": "Table 6: failure-mode distribution",
        "differs": "per dataset (not pooled), unperturbed turns of all temperatures, labels from the `learned` judge",
    },
    {
        "paper": "probe paper",
        "item": "Table 7",
        "shows": "judge validation: N, agreement and kappa, genuine and per label, random and balanced slices",
        "part": "probe",
        "fic_table": None,
        "differs": "no table in the report: each part prints the judge's test-split kappa and false-positive rate "
        "on 180 labelled SmolLM2 turns (labels by independent AI-agent annotators following a written "
        "guideline, blind; labels/followup/judge_eval.json)",
    },
    {
        "paper": "Found in Conversation (VASD)",
        "item": "main result",
        "shows": "share of single-turn performance recovered in the sharded multi-turn view (>= 92%; 100% on two "
        "Llama backbones), single-turn views kept",
        "part": "vasd",
        "fic_table": "P per view, greedy",
        "differs": f"{MODEL} after a short single-turn SFT (the base model fails every candidate task), instead of "
        "multi-billion-parameter backbones; synthetic arithmetic (1 update, 3 shards) instead of the paper's tasks; "
        "100 test tasks, one seed; 30 steps x 8 rows; `single_turn_mix` 0.5 chosen after 0.3 missed on the same "
        "test tasks",
    },
    {
        "paper": "Lost in Conversation",
        "item": "P, A90, U90-10 per mode",
        "shows": "averaged performance, aptitude and unreliability in FULL, CONCAT and SHARDED",
        "part": "vasd",
        "fic_table": "Lost-in-Conversation metrics",
        "differs": "20 synthetic tasks x 3 sampled runs at T=0.7 before and after VASD; a rule user that reveals "
        "the shards verbatim",
    },
    {
        "paper": "RegretBench",
        "item": "regret by policy",
        "shows": "regret against a reference clarification policy, intent resolution, interaction cost, "
        "ineffective clarification, stopping errors",
        "part": "clarify",
        "fic_table": "regret and its parts by policy",
        "differs": f"{MODEL}; products and AmbigQA scenarios; a rule-based simulated user under five profiles (no "
        "LLM user); the model policy on 6 episodes and BAG on 3 (x 5 profiles sharing one first turn), the rule "
        "policies on 40",
    },
    {
        "paper": "BAG (Belief-Augmented Generation)",
        "item": "BAG against prompt-only",
        "shows": "answer accuracy with the K sampled answers shown as a belief state, against the same prompt "
        "without them",
        "part": "clarify",
        "fic_table": "BAG against the prompt-only baseline",
        "differs": f"{MODEL}; 10 AmbigQA items, K=5 samples at T=1; a clarification is answered by a rule-based user",
    },
)


def crosswalk() -> list[dict]:
    """`CROSSWALK` as summary.json keeps it (a list of plain dicts)."""
    return [dict(entry) for entry in CROSSWALK]


def markdown(entries: list[dict]) -> list[str]:
    """The crosswalk as the report's first table (Markdown lines)."""
    lines = ["## Crosswalk: the papers' tables and figures -> fic's tables", "",
             "| paper | paper's item | what it shows | fic part | fic table | what differs here |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for e in entries:
        cells = [e["paper"], e["item"], e["shows"], e["part"], e["fic_table"] or "**none**", e["differs"]]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return lines
