"""The `learned` and `strict` judges: the offline rules (`fic.judges.heuristic`) decide the sure cases, a classifier
fitted on labelled real model turns (`fic.judges.classifier`) decides what the surface rules leave open.

Both are this class with a different fitted file: `learned` loads `classifier.json` (fitted on labelled real model
turns; the judge of rates), `strict` loads `classifier_strict.json` (refitted on SmolLM2's and trained models' turns
alike at a stricter threshold; the judge of training signals). Any other `classifier.json` written by
`scripts/train_judge_classifier.py` loads the same way (`LearnedJudge(path)`).

Per case: a genuine verdict the rules are sure of (grounded in the answer and phrased as a follow-up: confidence >=
`classifier.keep_sure_genuine`) stands. Otherwise P(genuine) >= the classifier's threshold makes it genuine; below it,
the rules' failure label stands where they had one, and the failure head names one where they had not.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .base import Case, Verdict
from .classifier import DEFAULT_PATH, STRICT_PATH, FollowupClassifier
from .heuristic import RULES_VERSION, HeuristicJudge, HeuristicJudgeConfig
from .labels import GENUINE_FOLLOWUP

SHIPPED = {"learned": DEFAULT_PATH, "strict": STRICT_PATH}  # the fitted files that ship with fic, by judge name


class LearnedJudge:
    """The rules plus a fitted classifier.

    Args:
        classifier: a shipped judge's name (`learned`, `strict`: `SHIPPED`), a path to a `classifier.json`, or a
            `FollowupClassifier` (the fitting script's candidates).
        config: the rules' thresholds.
        name: the judge's name in verdicts and reports (default: the shipped name, `learned` otherwise).
    """

    def __init__(self, classifier: str | Path | FollowupClassifier = "learned",
                 config: HeuristicJudgeConfig | None = None, name: str | None = None):  # fmt: skip
        shipped = []
        if isinstance(classifier, FollowupClassifier):
            self.classifier = classifier
        else:
            path = Path(SHIPPED.get(str(classifier), classifier))
            if not path.is_file():
                raise FileNotFoundError(
                    f"classifier={str(classifier)!r}: no fitted judge file at {path}; name a shipped one "
                    f"({', '.join(SHIPPED)}) or a classifier.json written by scripts/train_judge_classifier.py"
                )
            shipped = [kind for kind, file in SHIPPED.items() if Path(file).resolve() == path.resolve()]
            self.classifier = FollowupClassifier.load(path)
        self.name = name or (shipped[0] if shipped else "learned")
        self.rules = HeuristicJudge(config, name=self.name)

    @property
    def version(self) -> str:
        """Which rules and which fitted classifier decided: reports print it beside every rate."""
        return f"{RULES_VERSION}+{self.classifier.meta.get('version', 'classifier')}"

    @property
    def provenance(self) -> dict:
        """The items the classifier was fitted on (`fic.judges.provenance`; None, "provenance unknown", for a file
        that does not record them)."""
        keys = self.classifier.meta.get("fitted_items")
        if keys is None:
            return {"source": f"{self.version}: provenance unknown", "fitted_items": None, "datasets": {}}
        datasets: dict[str, int] = {}
        for key in keys:
            datasets[key.split("/")[0]] = datasets.get(key.split("/")[0], 0) + 1
        return {"source": self.version, "fitted_items": {k.rsplit("/", 1)[-1] for k in keys}, "datasets": datasets}

    def judge(self, cases: list[Case]) -> list[Verdict]:
        verdicts, open_cases = self.rules.rule_verdicts(cases, features=True)
        if open_cases:
            rows = np.asarray([row for _, row in open_cases])
            p_genuine = self.classifier.p_genuine(rows)
            failures = self.classifier.failure_labels(rows)
            for (i, _), p, failure in zip(open_cases, p_genuine, failures):
                verdicts[i] = self.learned_verdict(verdicts[i], float(p), failure)
        return verdicts

    def learned_verdict(self, rule: Verdict, p_genuine: float, failure: str) -> Verdict:
        """The classifier's decision on a case the surface rules left open (the module docstring's rule)."""
        model = self.classifier
        extra = {**rule.extra, "rule_label": rule.label, "p_genuine": round(p_genuine, 4)}
        if rule.genuine and (rule.confidence or 0.0) >= model.keep_sure_genuine:
            return Verdict(label=rule.label, confidence=rule.confidence, rationale=rule.rationale, judge=self.name,
                           extra=extra)  # fmt: skip
        if p_genuine >= model.threshold:
            label, why = GENUINE_FOLLOWUP, f"classifier: P(genuine) {p_genuine:.2f}; rules: {rule.rationale}"
        elif not rule.genuine:  # both say failure: the rules name which one (their reasons are specific)
            label, why = rule.label, f"classifier: P(genuine) {p_genuine:.2f}; rules: {rule.rationale}"
        else:
            label, why = failure, f"classifier: P(genuine) {p_genuine:.2f}, likeliest {failure}; rules said genuine"
        # Far from the threshold on either side is as sure as the surer rules; near it, unsure (cascade material).
        # The margin is measured against the room on its own side, so P(genuine) 1 is as sure as P(genuine) 0.
        room = (1 - model.threshold) if p_genuine >= model.threshold else model.threshold
        margin = abs(p_genuine - model.threshold) / max(room, 1e-9)
        confidence = 0.5 + 0.45 * min(1.0, margin)
        return Verdict(label=label, confidence=confidence, rationale=why, judge=self.name, extra=extra)
