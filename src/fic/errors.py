"""The errors that mean "the input is wrong", which entry points print as one line instead of a traceback."""

from fic.chat import ChatTemplateError
from fic.data.records import DataError
from fic.modeling import ModelLoadError
from fic.recipe import RecipeError

USER_ERRORS: tuple[type[BaseException], ...] = (RecipeError, ModelLoadError, ChatTemplateError, DataError)
