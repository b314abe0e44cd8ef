"""The crosswalk at the top of the report: each seed paper's table or figure -> the fic table that stands for it ->
what differs.

`CROSSWALK` is the one place that says which of the report's tables answers which item of which paper. The paper's
own number is in `item` (fic's probe tables carry their own numbers, which do not match the paper's: fic's "Table 1"
is the probe paper's Table 4 and fic's "Table 4" its Table 1). `fic_table` is a piece of the caption of the fic
table (as the part's modules write it; `tests/test_reproduce.py` checks that it is there), or None where fic has no
such table yet. `differs` says what is not as in the paper: model, sizes, data, judge, and what is missing. Papers
whose table numbers are not recorded in this repository name the result instead of a number.
"""

from __future__ import annotations

import repro

_PROBE = repro.load_settings("probe")
_VASD = repro.load_settings("vasd")

MODEL = "SmolLM2-135M-Instruct on 2 CPU cores"
_VASD_STEPS = dict(o.split("=", 1) for o in _VASD["vasd"]["overrides"]).get("max_steps")
_PROBE_TEMPERATURES = ", ".join(f"{t:g}" for t in _PROBE["temperatures"]) + (
    " (0.3 dropped for time; SCALE=gpu adds it)" if 0.3 not in _PROBE["temperatures"] else ""
)
_PROBE_ITEMS = (
    f"{_PROBE['limit']} items per dataset outside the judge's fit, 1 greedy turn per item at T=0 and "
    f"{_PROBE['samples']} per item at each T > 0"
)
JUDGE = "the offline `learned` judge (rules + a classifier fitted on labels by AI-agent annotators), not an LLM judge"

CROSSWALK = (
    {
        "paper": "probe paper",
        "item": "Table 1",
        "shows": "controls: truncate the answer, append a generic question; base and perturbed rate, % changed",
        "part": "probe",
        "fic_table": "Table 1: controls",
        "differs": f"{MODEL}; {_PROBE_ITEMS}; controls at T=0 only (at T=1.0 another seed alone changed 97-100% of "
        "the turns in the earlier run, so % changed cannot show a control there; SCALE=gpu adds T=1.0); judged by "
        f"{JUDGE}; adds the paired difference from the base with its minimum detectable effect, and the seed floor "
        "of % changed",
    },
    {
        "paper": "probe paper",
        "item": "Table 2",
        "shows": "collaboration post-training (collab SFT, follow-up RL) on held-out HealthBench, Coval and IFBench",
        "part": "collab",
        "fic_table": "Held-out genuine follow-up rate",
        "differs": f"{MODEL} instead of Qwen3.5-2B; 9 held-out HealthBench multi-turn contexts; 20 held-out MT-Bench "
        "questions stand in for Coval (openai/coval is not available offline); no IFBench column; SFT in three data "
        "arms of the same budget (real MT-Bench second turns only, as HealthBench's multi-turn items are all held "
        "out; template follow-ups unfiltered; template follow-ups filtered by the strict judge of training signals, "
        "contrastively), "
        "35 rows each, learning rate and steps chosen on dev contexts; the generic floor of every model; calibrated "
        "rates only where blind labels of the run's turns exist; one seed",
    },
    {
        "paper": "probe paper",
        "item": "Table 2, base model",
        "shows": "the base model's follow-up rate on held-out HealthBench, Coval and IFBench",
        "part": "probe",
        "fic_table": "Table 2 (base model)",
        "differs": f"{MODEL}; {_PROBE_ITEMS}; HealthBench (first 30 examples) and IFBench as in the paper, MT-Bench "
        "stands in for Coval (openai/coval is not available offline); raw rate at T=0.7 beside the corrected rate "
        "and the generic floor of every turn; the trained models' rows are in the collab part's table",
    },
    {
        "paper": "probe paper",
        "item": "Tables 3 and 5",
        "shows": "task accuracy beside the follow-up rate",
        "part": "probe",
        "fic_table": "Tables 3 and 5: answer accuracy beside",
        "differs": "accuracy only where a checker exists (GSM8K); the other datasets show n/a; adds the follow-up "
        "rate when the answer was right and when it was wrong, with item-clustered intervals",
    },
    {
        "paper": "probe paper",
        "item": "Table 4",
        "shows": "genuine follow-up rate by temperature",
        "part": "probe",
        "fic_table": "Table 4: genuine follow-up rate by temperature",
        "differs": f"{MODEL}; GSM8K, MT-Bench, HealthBench, IFBench (IFEval dropped for time; SCALE=gpu adds it); "
        f"{_PROBE_ITEMS}; T in {_PROBE_TEMPERATURES}; the T=1.0 - T=0 paired difference with its minimum "
        "detectable effect is a separate table",
    },
    {
        "paper": "probe paper",
        "item": "GPQA column",
        "shows": "the follow-up rate on GPQA questions",
        "part": "probe",
        "fic_table": None,
        "differs": "not reproduced: GPQA is gated on the hub and its authors ask that it not be posted, so no offline "
        "copy exists here (../shared/data has none); `fic probe --datasets gpqa:PATH` runs it from a local copy",
    },
    {
        "paper": "probe paper",
        "item": "Figures 1 and 4",
        "shows": "follow-up rate against temperature, drawn",
        "part": "probe",
        "fic_table": "Figures 1 and 4: genuine follow-up rate against temperature",
        "differs": "one figure for both: the rates of fic's Table 4 with their 95% item-clustered intervals as error "
        "bars, a PNG in the probe part's folder, embedded in report.md",
    },
    {
        "paper": "probe paper",
        "item": "Table 6",
        "shows": "failure-mode distribution",
        "part": "probe",
        "fic_table": "Table 6: failure modes, pooled",
        "differs": "pooled over datasets and temperatures with item-clustered intervals, each dataset's share beside; "
        "unperturbed turns; labels from the `learned` judge",
    },
    {
        "paper": "probe paper",
        "item": "Table 7",
        "shows": "judge validation: N, agreement and kappa, genuine and per label, random and balanced slices",
        "part": "probe",
        "fic_table": "Table 7: judge validation",
        "differs": "on the labels' test split only (180 SmolLM2 turns of 12 items; 27 of them double-labelled), "
        "labels by independent AI-agent annotators following a written guideline, blind, not by people; the judge "
        "is fic's offline `learned` judge; kappas with bootstrap intervals over items",
    },
    {
        "paper": "Found in Conversation (VASD)",
        "item": "main result",
        "shows": "share of single-turn performance recovered in the sharded multi-turn view (P_sharded after "
        "training >= 92% of P_full; 100% on two Llama backbones), single-turn views kept",
        "part": "vasd",
        "fic_table": "P per view, greedy",
        "differs": f"{MODEL} after a short single-turn SFT (run unless the base model qualifies on dev; it failed "
        "every candidate when last measured), instead of multi-billion-parameter backbones; synthetic arithmetic "
        "instead of the paper's tasks; LoRA with the adapter-off teacher, as the flagship recipe; the task and the "
        f"training configuration (a grid of {len(_VASD['vasd']['grid'])}: learning rate, rank, replay share, KL "
        "direction, on-policy responses, full fine-tuning) chosen by a stated rule on a dev split, results on "
        f"{_VASD['eval']['test_n']} test tasks never used for a choice; {len(_VASD['vasd']['seeds'])} seeds; "
        f"{_VASD_STEPS} steps x 8 rows; adds a same-budget self-SFT control "
        f"on {len(_VASD['vasd']['control_seeds'])} seed(s) (the model's own greedy single-turn answers as targets "
        "on the same sharded view); recovery reported as the share of the multi-turn gap closed, the paper's 92% "
        "read on that scale at the run's before scores; intervals resample seeds and tasks, paired by task and seed",
    },
    {
        "paper": "Lost in Conversation",
        "item": "P, A90, U90-10 per mode",
        "shows": "averaged performance, aptitude and unreliability in FULL, CONCAT and SHARDED",
        "part": "vasd",
        "fic_table": "Lost-in-Conversation metrics",
        "differs": f"{_VASD['eval']['sampled']['n']} synthetic test tasks x {_VASD['eval']['sampled']['runs']} "
        f"sampled runs at T={_VASD['eval']['sampled']['temperature']}, the start model and VASD seed 0; a rule user "
        "that reveals the shards verbatim",
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
        "differs": f"{MODEL}; 10 AmbigQA items, K=5 samples at a belief temperature chosen from 0.3, 0.7 and 1.0 on "
        "10 other (dev) AmbigQA items; a clarification is answered by a rule-based user",
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
