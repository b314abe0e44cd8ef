"""Experiment tracking: wandb set up from the recipe, offline when no key is set, and secrets kept out of it.

Secrets reach fic only through environment variables (`WANDB_API_KEY`, `OPENAI_API_KEY`, `FIC_JUDGE_API_KEY`,
`HF_TOKEN`, ...). Anything fic logs, hands to wandb or writes next to a run goes through `redact` first, which
removes three kinds of leak: a value under a secret-looking key (`api_key`, `token`, `password`, ...), credentials
inside a URL (`https://user:pass@host`), and the literal value of any secret-looking environment variable wherever
it appears inside a string.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

logger = logging.getLogger(__name__)

SECRET_MARKERS = ("api_key", "apikey", "token", "secret", "password", "passwd", "credential", "auth")
REDACTED = "<redacted>"
# Names of fields that contain a secret marker but hold no secret (token counts, tokenizer names, ...).
_NOT_SECRET = re.compile(
    r"tokens(_|$)|tokeniz|token_(id|type)|(pad|eos|bos|unk|sep|cls|mask|special)_token|(max|min|num)_\w*token|author(?!i[sz])"
)
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s:]*:[^/@\s]*)@")
_MIN_SECRET_LENGTH = 8  # shorter env values ("1", "true") would blank out ordinary text


def is_secret_key(key: str) -> bool:
    """Whether a mapping key or an environment variable name looks like it holds a secret."""
    lowered = str(key).lower()
    return any(marker in lowered for marker in SECRET_MARKERS) and not _NOT_SECRET.search(lowered)


def secret_values(environ: dict | None = None) -> list[str]:
    """The values of secret-looking environment variables (long enough to be keys), longest first."""
    environ = os.environ if environ is None else environ
    values = {v for k, v in environ.items() if is_secret_key(k) and v and len(v) >= _MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def scrub(text: str, secrets: list[str] | None = None) -> str:
    """`text` with URL credentials and every known secret value replaced by `<redacted>`."""
    secrets = secret_values() if secrets is None else secrets
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    for value in secrets:
        text = text.replace(value, REDACTED)
    return text


def redact(obj, secrets: list[str] | None = None):
    """A copy of `obj` (nested dicts, lists, strings, scalars) safe to log: see the module docstring."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if is_secret_key(key) and value not in (None, "", False):
                out[key] = REDACTED
            else:
                out[key] = redact(value, secrets)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, secrets) for v in obj)
    if isinstance(obj, str):
        return scrub(obj, secrets)
    return obj


def public_config(raw: dict) -> dict:
    """The recipe mapping with every secret removed (for logs and the wandb config)."""
    return redact(raw)


def wants_wandb(report_to) -> bool:
    report_to = report_to if isinstance(report_to, (list, tuple)) else [report_to]
    return "wandb" in report_to or "all" in report_to


def has_wandb_key() -> bool:
    """A key in the environment or a login stored by `wandb login` (~/.netrc)."""
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return bool(os.environ.get("WANDB_API_KEY")) or netrc.exists()


def configure_wandb(output_dir: str | Path, report_to="wandb", project: str = "fic") -> str | None:
    """Environment for wandb before the Trainer starts it; returns the mode (`online`/`offline`) or None if unused.

    No key and no explicit `WANDB_MODE`: offline, so a run never blocks on a login prompt; the files land in
    `OUTPUT_DIR/wandb` and `wandb sync` uploads them later.
    """
    if not wants_wandb(report_to):
        return None
    if "WANDB_MODE" not in os.environ and not has_wandb_key():
        os.environ["WANDB_MODE"] = "offline"
        logger.info("no WANDB_API_KEY: wandb runs offline; upload later with `wandb sync %s/wandb/offline-run-*`",
                    output_dir)  # fmt: skip
    os.environ.setdefault("WANDB_PROJECT", project)
    os.environ.setdefault("WANDB_DIR", str(output_dir))
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    return os.environ["WANDB_MODE"] if os.environ.get("WANDB_MODE") else "online"


def wandb_run():
    """The active wandb run, or None (wandb not installed, not started, or this is not the main process)."""
    try:
        import wandb  # wandb: heavy, and only a logging run has one
    except ImportError:
        return None
    return wandb.run


def update_wandb_config(values: dict) -> bool:
    """Merge `values` (redacted) into the active run's config; False when no run is active."""
    run = wandb_run()
    if run is None:
        return False
    run.config.update(redact(values), allow_val_change=True)
    return True
