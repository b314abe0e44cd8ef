"""`FicError`: the one base class of "the input is wrong" errors, which entry points print as one line.

It sits at the bottom of the core and imports nothing of fic. Each room defines its own subclass next to the code that
raises it (`RecipeError` in `fic.recipe`, `DataError` in `fic.data.records`, `ModelLoadError` in `fic.modeling`,
`ChatTemplateError` in `fic.chat`, ...), keeping its historical base (`ValueError` or `RuntimeError`) as well, so
`except ValueError` keeps working. `train.py` and `fic` catch `FicError`, print `error: MESSAGE` and exit 1; a
message names the field, the value and the fix, so no traceback is needed.
"""


class FicError(Exception):
    """A user error: a bad argument, recipe key, file, row, model name or chat template; the message says the fix."""


# Kept for callers that catch a tuple (`except USER_ERRORS`).
USER_ERRORS: tuple[type[BaseException], ...] = (FicError,)
