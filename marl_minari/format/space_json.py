"""Spaces as JSON strings: Minari's form, and a compact form for this package's own keys.

Minari 0.5's ``deserialize_space`` only reads a ``Box`` whose ``low``/``high`` are lists of
one number per element (a scalar with a larger ``shape`` fails Gymnasium's shape check), so
the spaces in Minari's keys (``observation_space``, ``action_space``) stay element-wise; they
are only written without whitespace. Where this package alone reads a space (the state space,
recording journals), a ``Box`` whose bounds are one value everywhere is written with scalar
``low``/``high`` beside its ``shape``: a 560x880x3 image state is a few bytes, not 14 MB.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces
from minari.serialization import deserialize_space, serialize_space


def space_to_json(space: spaces.Space, *, compact_bounds: bool = False) -> str:
    """``space`` as a JSON string Minari's form uses, without whitespace.

    Args:
        space: the space (Dict/Tuple nest).
        compact_bounds: write uniform ``Box`` bounds as one scalar each. Only
            :func:`space_from_json` reads that form; plain Minari does not.
    """
    tree = _space_dict(space, compact_bounds)
    text = json.dumps(tree, separators=(",", ":"), default=_placeholder)
    # Element-wise bounds of uniform Boxes are spliced in as text: building (and encoding)
    # millions of Python numbers for an image space takes seconds, repeating a string does not.
    spliced = {json.dumps(_placeholder(r)): r for r in _repeated_in(tree)}
    if not spliced:
        return text
    return re.sub("|".join(re.escape(key) for key in spliced),
                  lambda match: spliced[match.group(0)].text(), text)


def space_from_json(text: str | dict[str, Any]) -> spaces.Space:
    """Inverse of :func:`space_to_json` (either form); Minari's own strings read too.

    Raises:
        ValueError, KeyError, TypeError: malformed text (callers name the key it came from).
    """
    data = _load_space_json(text) if isinstance(text, str) else text
    if not isinstance(data, dict):
        raise TypeError(f"a space is a JSON object, got {type(data).__name__}")
    kind = data.get("type")
    if kind == "Dict":
        return spaces.Dict({key: space_from_json(sub) for key, sub in data["subspaces"].items()})
    if kind == "Tuple":
        return spaces.Tuple(tuple(space_from_json(sub) for sub in data["subspaces"]))
    if kind == "Box" and _scalar(data["low"]) and _scalar(data["high"]) and data["shape"]:
        shape = tuple(int(n) for n in data["shape"])
        return spaces.Box(low=np.full(shape, data["low"], dtype=data["dtype"]),
                          high=np.full(shape, data["high"], dtype=data["dtype"]),
                          shape=shape, dtype=data["dtype"])
    try:
        return deserialize_space(data)
    except NotImplementedError as exc:
        raise ValueError(f"unknown space type {kind!r}") from exc


_BOUNDS_START = re.compile(r'"(?:low|high)":\s*\[')
# The outermost ``]`` of a bound: the next thing is another key or the Box's end. Inner
# lists end in ``],[`` or ``]]``, and numbers hold neither quotes nor braces.
_BOUNDS_END = re.compile(r'\](?=\s*(?:,\s*"|\}))')
_NO_BRACKETS = str.maketrans("[]", "  ")


def _load_space_json(text: str) -> Any:
    """``json.loads(text)``, with each ``Box``'s element-wise bounds read as one flat array.

    An image env's Box bounds spelled out element-wise (Minari's form) are millions of
    numbers: ``json.loads`` makes a Python object of each (seconds per dataset), numpy's C
    parser reads them at once. The bounds are cut out of the text, the rest is parsed as
    JSON, and each bound is parsed with the Box's dtype (64-bit integers exactly, not through
    float64) and must fill its shape; anything unexpected falls back to ``json.loads`` of the
    whole text.
    """
    pieces: list[str] = []
    bounds: list[str] = []
    position = 0
    for found in _BOUNDS_START.finditer(text):
        end = _BOUNDS_END.search(text, found.end())
        if end is None:
            return json.loads(text)
        value_start = found.end() - 1
        pieces += [text[position:value_start], f'{{"@marl_minari_bounds": {len(bounds)}}}']
        bounds.append(text[value_start:end.end()])
        position = end.end()
    if not bounds:
        return json.loads(text)
    pieces.append(text[position:])
    try:
        return _with_bounds(json.loads("".join(pieces)), bounds)
    except (ValueError, KeyError, TypeError):
        return json.loads(text)


def _with_bounds(tree: Any, bounds: list[str]) -> Any:
    """``tree`` with the placeholders of :func:`_load_space_json` replaced by arrays."""
    if isinstance(tree, list):
        return [_with_bounds(item, bounds) for item in tree]
    if not isinstance(tree, dict):
        return tree
    out = {key: _with_bounds(value, bounds) for key, value in tree.items()
           if key not in ("low", "high")}
    for key in ("low", "high"):
        if key not in tree:
            continue
        value = tree[key]
        if isinstance(value, dict) and "@marl_minari_bounds" in value:
            dtype = np.dtype(tree["dtype"])  # KeyError outside a Box: the slow path decides
            shape = tuple(int(n) for n in tree["shape"])
            parse_as = dtype if dtype.kind in "iu" else np.dtype(np.float64)
            text = bounds[value["@marl_minari_bounds"]].translate(_NO_BRACKETS)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # numpy only warns about text it cannot read
                flat = (np.fromstring(text, dtype=parse_as, sep=",") if text.strip()
                        else np.zeros(0, dtype=parse_as))
            out[key] = flat.reshape(shape)  # ValueError unless it fills the shape
        else:
            out[key] = _with_bounds(value, bounds)
    return out


def _space_dict(space: spaces.Space, compact_bounds: bool) -> dict[str, Any]:
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "subspaces": {
            key: _space_dict(sub, compact_bounds) for key, sub in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple",
                "subspaces": [_space_dict(sub, compact_bounds) for sub in space.spaces]}
    if isinstance(space, spaces.Box) and _uniform(space.low) and _uniform(space.high):
        low, high = space.low.flat[0].item(), space.high.flat[0].item()
        if not compact_bounds:  # Minari's element-wise lists, spelled out without tolist()
            low, high = _Repeated(low, space.shape), _Repeated(high, space.shape)
        return {"type": "Box", "dtype": str(space.dtype), "shape": list(space.shape),
                "low": low, "high": high}
    out = serialize_space(space, to_string=False)
    assert isinstance(out, dict)
    return out


class _Repeated:
    """One JSON number repeated as nested lists of ``shape`` (Minari's element-wise bounds)."""

    def __init__(self, value: float | int, shape: tuple[int, ...]) -> None:
        self.value, self.shape = value, shape

    def text(self) -> str:
        text = json.dumps(self.value)
        for size in reversed(self.shape):
            text = "[" + ",".join([text] * size) + "]"
        return text


def _placeholder(value: Any) -> str:
    if isinstance(value, _Repeated):
        return f"@@marl_minari_bounds_{id(value)}@@"
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _repeated_in(tree: Any) -> list[_Repeated]:
    if isinstance(tree, _Repeated):
        return [tree]
    if isinstance(tree, dict):
        return [r for sub in tree.values() for r in _repeated_in(sub)]
    if isinstance(tree, list):
        return [r for sub in tree for r in _repeated_in(sub)]
    return []


def _uniform(bounds: np.ndarray) -> bool:
    return bounds.size > 0 and bool((bounds == bounds.flat[0]).all())


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
