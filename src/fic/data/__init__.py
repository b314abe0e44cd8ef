"""Dataset sources for fic: a registry of loaders that yield normalised `Record`s, and answer checkers.

Name a dataset as `NAME` (its Hugging Face hub copy) or `NAME:PATH` (a local file with the same schema):

```python
from fic.data import load_source, check_answer

records = load_source("gsm8k:../shared/data/gsm8k/test.jsonl", limit=8)
check_answer(records[0], "... so she makes $18.")  # True
```
"""

from .checkers import check_answer, extract_choice, extract_final_number, normalize_number
from .records import ROLES, DataError, Record
from .sources import SOURCES, Source, get_source, load_source, parse_spec, register_source

__all__ = [
    "ROLES",
    "SOURCES",
    "DataError",
    "Record",
    "Source",
    "check_answer",
    "extract_choice",
    "extract_final_number",
    "get_source",
    "load_source",
    "normalize_number",
    "parse_spec",
    "register_source",
]
