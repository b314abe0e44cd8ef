"""`FicError`: the one base class of "the input is wrong" errors, which entry points print as one line.

It sits at the bottom of the core and imports nothing of fic. Each room defines its own subclass next to the code
that raises it (`RecipeError` in `fic.recipe`, `DataError` in `fic.data.records`, `ChatTemplateError` in `fic.chat`,
...); `ModelLoadError` lives here because `fic.modeling`, `fic.gguf` and the generation backends all raise it. Each
keeps its historical base (`ValueError` or `RuntimeError`) as well, so `except ValueError` keeps working. `train.py` and `fic` catch `FicError`, print `error: MESSAGE` and exit 1; a
message names the field, the value and the fix, so no traceback is needed.
"""

import os
from pathlib import Path


class FicError(Exception):
    """A user error: a bad argument, recipe key, file, row, model name or chat template; the message says the fix."""


# Kept for callers that catch a tuple (`except USER_ERRORS`).
USER_ERRORS: tuple[type[BaseException], ...] = (FicError,)


class ModelLoadError(FicError, RuntimeError):
    """A model or tokenizer could not be loaded; the message names it and the fix."""


def model_load_error(name: str, what: str, err: Exception) -> ModelLoadError:
    """The `ModelLoadError` for a failed load of `what` (model, tokenizer) from `name`: a damaged local folder, a
    missing one, or a hub id that is neither cached nor reachable, each with its fix."""
    detail = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    if os.path.isdir(name):  # a local folder with missing or damaged files (an interrupted save or copy)
        return ModelLoadError(
            f"could not load {what} from the local folder {name!r}: its files are missing or damaged ({detail}). "
            "An interrupted save or copy leaves such folders; point at a complete checkpoint (one with "
            "trainer_state.json) or save the model there again."
        )
    path = Path(name).expanduser()
    in_existing_folder = bool(path.parent.parts) and path.parent.is_dir()
    if name.startswith((".", "/", "~")) or path.parent.name == "outputs" or in_existing_folder:
        hint = ""
        if path.parent.name == "outputs":  # fic writes a recipe's model to outputs/RECIPE
            hint = f" It is where `python train.py recipe={path.name}` writes its model: run that recipe first."
        return ModelLoadError(f"could not load {what}: the local folder {name!r} does not exist.{hint}")
    offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    where = "the hub is switched off (HF_HUB_OFFLINE=1)" if offline else "the hub did not serve it"
    return ModelLoadError(
        f"could not load {what} {name!r}: it is not a local directory, not in the Hugging Face cache, and {where}. "
        f"Fetch it where the hub is reachable (`hf download {name} --local-dir PATH`) and pass "
        f"model_name_or_path=PATH (`--model PATH` to fic commands). ({detail})"
    )
