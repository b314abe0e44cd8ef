"""Recipes: `recipes/NAME.yaml` plus `dotted.key=value` overrides -> typed config dataclasses.

A recipe is flat, as in TRL's own example configs: every top-level key belongs to one of the method's dataclasses
(its `<Method>Config`, a subclass of a TRL config, and TRL's `ModelConfig`), except `method`, `description`, and
nested blocks such as `eval:` that parse into their own dataclass. A block's class may hold blocks of its own
(`recipe_blocks()`, e.g. `eval.lic.*`). Overrides are merged with OmegaConf. Unknown keys are errors that suggest the closest valid keys; values are checked against the field's type before any dataclass is
built, so a bad value names the key, the value and the expected type instead of failing deep inside a trainer.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fic.errors import FicError

RESERVED_KEYS = ("method", "description", "train_on_test")  # train_on_test: see fic.data.splits


class RecipeError(FicError, ValueError):
    """A recipe or an override is wrong; the message says which key, which value, and what would be valid."""


@dataclass
class Recipe:
    """A loaded recipe: its name, method, the parsed dataclasses and the merged raw mapping (for logging)."""

    name: str
    method: str
    configs: dict[type, Any]
    raw: dict = field(default_factory=dict)

    def get(self, cls: type):
        """The parsed instance of `cls` (one of the dataclasses the recipe was parsed into)."""
        return self.configs[cls]


def available_recipes(recipes_dir: str | Path) -> list[str]:
    return sorted(p.stem for p in Path(recipes_dir).glob("*.yaml"))


def load_raw(name: str, overrides: list[str], recipes_dir: str | Path) -> dict:
    """Read `recipes_dir/NAME.yaml` (or a path to a YAML file) and merge `key=value` overrides into a plain dict."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    path = Path(name) if name.endswith((".yaml", ".yml")) else Path(recipes_dir) / f"{name}.yaml"
    if not path.is_file():
        names = available_recipes(recipes_dir)
        close = difflib.get_close_matches(name, names, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise RecipeError(f"unknown recipe {name!r}.{hint} Available recipes: {', '.join(names) or '(none)'}")
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise RecipeError(f"override {item!r} is not of the form key=value (e.g. learning_rate=1e-5)")
    import yaml

    try:
        merged = OmegaConf.create(_yaml_load(path.read_text()) or {})
        for item in overrides:
            key, text = item.split("=", 1)
            OmegaConf.update(merged, key, _yaml_load(text) if text.strip() else "", merge=True, force_add=True)
        raw = OmegaConf.to_container(merged, resolve=True)
    except (OmegaConfBaseException, yaml.YAMLError) as err:
        raise RecipeError(f"recipe {path}: {err}") from None
    if not isinstance(raw, dict) or "method" not in raw:
        raise RecipeError(f"recipe {path}: missing top-level key 'method'")
    return raw


def _yaml_load(text: str):
    """YAML with YAML 1.2 booleans: only true/false are booleans, so `save_strategy: no`, `eval_strategy=no` and
    `report_to=none` keep the Trainer's own spelling (YAML 1.1, as PyYAML and OmegaConf read it, turns yes/no/on/off
    into booleans). Boolean fields still accept yes/no/on/off: `coerce` converts those strings."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    # and 1e-5 is a number, as in YAML 1.2 (YAML 1.1 needs a dot: 1.0e-5)
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    return yaml.load(text, Loader=Loader)  # noqa: S506  (a SafeLoader subclass)


def _fields(cls: type) -> dict[str, Any]:
    """Field name -> resolved type for the init fields of dataclass `cls`."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # some library dataclasses annotate with names that are not importable at runtime
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in _key_fields(cls)}


def _key_fields(cls: type) -> list[dataclasses.Field]:
    """The fields a recipe sets by key (not a block's `blocks`, which holds its nested blocks)."""
    return [f for f in dataclasses.fields(cls) if f.init and f.metadata.get("recipe_key", True)]


def _sub_blocks(cls: type) -> dict[str, type]:
    """The nested blocks of block class `cls` (`{"lic": LicConfig, ...}` for `EvalConfig`)."""
    return cls.recipe_blocks() if hasattr(cls, "recipe_blocks") else {}


def _walk_blocks(nested: dict[str, type], prefix: str = ""):
    """(dotted prefix, class) of every block and sub-block: ("eval.", EvalConfig), ("eval.lic.", LicConfig), ..."""
    for block, cls in nested.items():
        yield f"{prefix}{block}.", cls
        yield from _walk_blocks(_sub_blocks(cls), f"{prefix}{block}.")


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


def coerce(value: Any, tp: Any) -> Any:
    """Convert `value` to type `tp` or raise `TypeError`/`ValueError`. Unknown or complex types pass through."""
    origin = typing.get_origin(tp)
    if tp is Any or tp is object:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ValueError("None is not allowed")
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg)
            except (TypeError, ValueError) as err:
                errors.append(err)
        raise ValueError("no member of the union accepts it")
    if origin is typing.Literal:
        if value in typing.get_args(tp):
            return value
        raise ValueError(f"expected one of {list(typing.get_args(tp))}")
    if origin in (list, tuple, set) or tp in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise TypeError("expected a list")
        args = typing.get_args(tp)
        item = args[0] if args and args[0] is not Ellipsis else Any
        out = [coerce(v, item) for v in value]
        return tuple(out) if origin is tuple else out
    if origin is dict or tp is dict:
        if isinstance(value, str):
            import json

            value = json.loads(value)
        if not isinstance(value, dict):
            raise TypeError("expected a mapping")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(value, tp):
            return value
        return tp(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise TypeError("expected true or false")
    if tp is int:
        if isinstance(value, bool):
            raise TypeError("expected an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            return int(value.strip())
        raise TypeError("expected an integer")
    if tp is float:
        if isinstance(value, bool):
            raise TypeError("expected a number")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return float(value.strip())
        raise TypeError("expected a number")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise TypeError("expected a string")
    return value


def _build(cls: type, values: dict, prefix: str = "", extra: dict | None = None) -> Any:
    fields = _fields(cls)
    kwargs = dict(extra or {})
    for key, value in values.items():
        try:
            kwargs[key] = coerce(value, fields[key])
        except (TypeError, ValueError, KeyError):
            raise RecipeError(
                f"{prefix}{key}: invalid value {value!r} (expected {_describe_type(fields[key])})"
            ) from None
    try:
        return cls(**kwargs)
    except TypeError as err:  # a required field is missing
        raise RecipeError(f"{cls.__name__}: {err}") from None
    except ValueError as err:  # the dataclass's own __post_init__ checks
        raise RecipeError(f"{cls.__name__}: {err}") from None


def _unknown(key: str, valid: list[str], where: str) -> RecipeError:
    close = difflib.get_close_matches(key, valid, n=3, cutoff=0.6)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    return RecipeError(
        f"unknown key {key!r} {where}.{hint} (`python train.py recipe=NAME --help-keys` lists every key)"
    )


def parse(name: str, raw: dict, flat: list[type], nested: dict[str, type] | None = None) -> Recipe:
    """Split the merged mapping `raw` across the `flat` dataclasses and the `nested` blocks and build each one.

    A flat key goes to every flat dataclass that has a field of that name (TRL configs and `ModelConfig` share a
    few). A nested block `name: {...}` builds `nested[name]` from its keys.
    """
    nested = nested or {}
    per_class: dict[type, dict] = {cls: {} for cls in flat}
    valid = sorted({k for cls in flat for k in _fields(cls)} | set(nested) | set(RESERVED_KEYS))
    for key, value in raw.items():
        if key in RESERVED_KEYS:
            continue
        if key in nested:
            continue
        owners = [cls for cls in flat if key in _fields(cls)]
        if not owners:
            raise _unknown(key, valid, f"in recipe {name!r}")
        for cls in owners:
            per_class[cls][key] = value
    configs = {cls: _build(cls, values) for cls, values in per_class.items()}
    for block, cls in nested.items():
        configs[cls] = _build_block(cls, raw.get(block), f"{block}.", name)
    return Recipe(name=name, method=str(raw["method"]), configs=configs, raw=raw)


def _build_block(cls: type, values: Any, prefix: str, name: str) -> Any:
    """Build block class `cls` from the mapping `values` found at `prefix` (e.g. `eval.`), its sub-blocks first."""
    values = dict(_mapping(values, prefix))
    blocks = _sub_blocks(cls)
    own = sorted(_fields(cls))
    for key in values:
        if key not in own and key not in blocks:
            raise _unknown(f"{prefix}{key}", valid_keys([], {prefix[:-1]: cls}), f"in recipe {name!r}")
    built = {block: _build_block(sub, values.get(block), f"{prefix}{block}.", name) for block, sub in blocks.items()}
    mine = {k: v for k, v in values.items() if k not in blocks}
    return _build(cls, mine, prefix=prefix, extra={"blocks": built} if blocks else None)


def _mapping(values: Any, prefix: str) -> dict:
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise RecipeError(f"{prefix[:-1]}: expected a mapping of keys, got {values!r}")
    return values


def valid_keys(flat: list[type], nested: dict[str, type] | None = None) -> list[str]:
    """All keys a recipe of these dataclasses accepts (for `train.py --help-keys` and error messages)."""
    keys = {k for cls in flat for k in _fields(cls)}
    for prefix, cls in _walk_blocks(nested or {}):
        keys |= {f"{prefix}{k}" for k in _fields(cls)}
    return sorted(keys)


def _owner(cls: type, name: str) -> type:
    """The most derived class in `cls`'s MRO that declares field `name` (where its default comes from)."""
    for klass in cls.__mro__:
        if name in klass.__dict__.get("__annotations__", {}):
            return klass
    return cls


def _docstring_help(cls: type, name: str) -> str:
    """The first line of `name`'s entry in the HF-style `Args:` section of `cls`'s docstring (or of a base class)."""
    import re

    for klass in cls.__mro__:
        match = re.search(rf"^\s+{re.escape(name)} \(.*?\):\s*\n\s+(.+)$", klass.__doc__ or "", re.MULTILINE)
        if match:
            return match.group(1).strip()
    return ""


def _describe_type(tp: Any) -> str:
    """A type for people: `Literal` and `Enum` choices spelt out, `typing.` dropped."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return "one of " + " | ".join(map(str, args))
    if origin in (typing.Union, types.UnionType):
        return " or ".join("None" if a is type(None) else _describe_type(a) for a in args)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + " | ".join(str(m.value) for m in tp)
    return _type_name(tp)


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default.value if isinstance(f.default, enum.Enum) else f.default
        return repr(value)
    if f.default_factory is not dataclasses.MISSING:
        try:
            return repr(f.default_factory())
        except Exception:  # a factory that needs a runtime (devices, files)
            return "(computed)"
    return "(required)"


def describe_keys(flat: list[type], nested: dict[str, type] | None = None, width: int = 119) -> str:
    """Every key a recipe accepts, grouped by the class that owns it, with type, default and one line of help.

    fic's own keys (fields declared by a `fic` class, and the `nested` blocks such as `eval.*`) come first, then the
    keys of the libraries the configs subclass (TRL, transformers), each group under its class name. This is what
    `python train.py recipe=NAME --help-keys` prints.
    """
    groups: dict[type, list[tuple[str, dataclasses.Field, Any, type]]] = {}
    seen: set[str] = set()
    for cls in flat:
        hints = _fields(cls)
        for f in dataclasses.fields(cls):
            if not f.init or f.name in seen:
                continue
            seen.add(f.name)
            groups.setdefault(_owner(cls, f.name), []).append((f.name, f, hints.get(f.name, f.type), cls))
    blocks = [(prefix, cls, [(f.name, f, _fields(cls)[f.name], cls) for f in _key_fields(cls)])
              for prefix, cls in _walk_blocks(nested or {})]  # fmt: skip
    is_fic = lambda klass: klass.__module__.split(".")[0] == "fic"  # noqa: E731
    ordered = [("", k, v) for k, v in groups.items() if is_fic(k)] + blocks
    ordered += [("", k, v) for k, v in groups.items() if not is_fic(k)]
    lines = []
    for prefix, klass, entries in ordered:
        where = klass.__module__.split(".")[0]
        title = f"{prefix}* ({klass.__name__})" if prefix else f"{klass.__name__} ({where})"
        lines.append(f"\n{title}")
        for name, f, tp, cls in entries:
            help_text = (f.metadata.get("help") or _docstring_help(cls, name) or "").strip().splitlines()
            head = f"  {prefix}{name}: {_describe_type(tp)} = {_default_text(f)}"
            text = help_text[0] if help_text else ""
            lines.append(head if not text else f"{head}\n      {text[: width - 6]}")
    return "\n".join(lines).lstrip("\n")
