"""JSON text from a dataset or a registry (someone else's words), parsed with every failure
named as damage: malformed text, nesting past the parser's stack, an integer longer than
Python converts."""

from __future__ import annotations

import json
from typing import Any

from marl_minari.errors import CorruptedDataError


def load_json(raw: bytes | str, where: str, fix: str) -> Any:
    """The JSON value in ``raw``, read from ``where``.

    Raises:
        CorruptedDataError: ``raw`` is not UTF-8 JSON a reader can take; the message names
            ``where`` and ends with ``fix`` (how to mend it).
    """
    try:
        return json.loads(raw)
    except RecursionError:
        problem = "it nests deeper than a JSON parser follows"
    except UnicodeDecodeError as exc:
        problem = f"it is not UTF-8 ({exc})"
    except ValueError as exc:  # JSONDecodeError, and an integer past int_max_str_digits
        problem = ("it holds an integer of more digits than a reader converts"
                   if "integer string conversion" in str(exc) else f"{exc}")
    raise CorruptedDataError(f"{where} is not valid JSON: {problem}{fix}")
