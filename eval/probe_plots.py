"""PNG plots of a probe summary: rate vs temperature per dataset, label distribution, accuracy vs follow-up."""

from __future__ import annotations

from pathlib import Path


def write_plots(summary: dict, out_dir: str | Path) -> list[Path]:
    import matplotlib  # matplotlib: heavy, only the plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    paths = []

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for dataset, temps in summary["genuine_rate"].items():
        points = sorted((float(t[1:]), perts["none"]) for t, perts in temps.items() if "none" in perts)
        if points:
            xs = [p[0] for p in points]
            ax.plot(xs, [p[1]["rate"] for p in points], marker="o", label=dataset)
            ax.fill_between(xs, [p[1]["low"] for p in points], [p[1]["high"] for p in points], alpha=0.15)
    ax.set_xlabel("temperature")
    ax.set_ylabel("genuine follow-up rate")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "rate_vs_temperature.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.2))
    labels = summary["labels"]
    ax.barh(list(labels), list(labels.values()))
    ax.set_xlabel("share of generated user turns")
    ax.set_xlim(0, 1)
    fig.tight_layout()
    paths.append(out_dir / "labels.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(4, 3.2))
    for dataset, acc in summary.get("accuracy", {}).items():
        rates = [p["none"]["rate"] for p in summary["genuine_rate"].get(dataset, {}).values() if "none" in p]
        if acc.get("accuracy") is not None and rates:
            ax.scatter(acc["accuracy"], sum(rates) / len(rates))
            ax.annotate(dataset, (acc["accuracy"], sum(rates) / len(rates)), fontsize=7)
    ax.set_xlabel("task accuracy")
    ax.set_ylabel("mean genuine follow-up rate")
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.05, 1.05)
    fig.tight_layout()
    paths.append(out_dir / "accuracy_vs_followup.png")
    fig.savefig(paths[-1], dpi=100)
    plt.close(fig)
    return paths
