"""Argument checks shared by every kind of index.

A single :class:`~sobolev_index.SobolevIndex` and a sharded index take the
same arguments and refuse the same bad ones with the same messages, so the
checks live here, once: the writes' ids, keys, labels and fields, and the
searches' k, radius, limit, roots and ``where``. Each check raises a
ValueError or TypeError naming the value and what was expected, before
anything is read or written.
"""
import json
import math

import numpy as np

from ..errors import DuplicateKeyError

# Document ids are int64; the next id after the last must fit too.
MAX_ID = 2 ** 63 - 1


def check_room(next_doc, n):
    """ValueError unless n more ids from ``next_doc`` on leave the next id
    below MAX_ID (int64)."""
    if next_doc + n > MAX_ID - 1:
        raise ValueError(f"the index's next id is {next_doc}: {n} more documents would take "
                         f"ids beyond {MAX_ID - 2}, the largest an id may be")


def checked_ids(ids, n, next_doc):
    """``ids`` of a batch of n as int64, or a ValueError naming the bad value:
    n integers (Python or NumPy), strictly increasing, the first at least
    ``next_doc``, the last below MAX_ID - 1 (the next id must still fit)."""
    if isinstance(ids, (str, bytes, dict)) or not hasattr(ids, "__len__"):
        raise ValueError(f"ids is {ids!r:.60}; expected a list of {n} document ids")
    try:
        values = np.asarray(ids)
    except (TypeError, ValueError):  # ragged
        values = np.asarray(ids, dtype=object)
    if values.ndim != 1 or len(values) != n:
        shape = len(values) if values.ndim == 1 else f"an array of shape {values.shape} of"
        raise ValueError(f"{shape} ids were given for {n} measures; expected one each")
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if not isinstance(ids, np.ndarray):
        for i, value in enumerate(ids):  # NumPy would read True as 1
            if isinstance(value, (bool, np.bool_)):
                raise ValueError(f"id {i} is {value!r}; expected an integer")
    if values.dtype.kind in "iu":
        lowest, biggest = int(values.min()), int(values.max())
    else:
        for i, value in enumerate(values.tolist()):
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"id {i} is {value!r}; expected an integer")
        values = np.array([int(v) for v in values.tolist()], dtype=object)
        lowest, biggest = min(values.tolist()), max(values.tolist())
    if biggest >= MAX_ID - 1:
        raise ValueError(f"id {biggest} is too large; expected ids below {MAX_ID - 1}")
    if lowest < next_doc:
        raise ValueError(f"id {lowest} is below the index's next id {next_doc}; ids must be "
                         "new and rising (see next_id)")
    values = values.astype(np.int64)
    falls = np.flatnonzero(np.diff(values) <= 0)
    if len(falls):
        j = int(falls[0])
        raise ValueError(f"ids {int(values[j])} and {int(values[j + 1])} (places {j} and "
                         f"{j + 1}) do not rise; expected strictly increasing ids")
    return values


def checked_column(name, values, n, kind):
    if values is None:
        return [None] * n
    if isinstance(values, (str, dict)):
        raise TypeError(f"{name} must be a list with one entry per measure")
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{len(values)} {name} were given for {n} measures; expected one each")
    for i, value in enumerate(values):
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"{name}[{i}] is {value!r}; expected {kind.__name__} or None")
        if isinstance(value, str):
            check_text(f"{name}[{i}]", value)
    return values


def check_text(name, text):
    """ValueError unless ``text`` can be stored as UTF-8 (a lone surrogate,
    say from a JSON escape, cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is {text!r}, which holds {text[exc.start]!r} at position "
                         f"{exc.start}, a lone surrogate that UTF-8 cannot store") from None


def json_fields(fields, i):
    try:
        # NaN and infinity are not JSON: get() and export would print
        # non-standard text, so they are refused as the CLI refuses them.
        text = json.dumps(fields, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"fields[{i}] cannot be stored as JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"fields[{i}] is nested too deeply to store as JSON") from None
    return text


def check_sample_size(sample):
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 1:
        raise ValueError(f"sample is {sample!r}; expected an integer >= 1")
    return int(sample)


# A k above this is surely a mistake (it exceeds any index's size).
MAX_K = 2**53
# An approximate search takes its candidates from this many roots unless
# told otherwise. With 100 candidates, two roots found 93% (TWITTER) and
# 98% (topic corpus) of the ten nearest, one root 77% and 92%
# (docs/benchmarks.md, bench/approximate.py).
DEFAULT_CANDIDATE_ROOTS = 2


def check_positive(name, value):
    """An integer >= 1 (NumPy integers too, not booleans), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} is {value!r}; expected an integer >= 1")


def checked_search_args(k, radius, limit):
    """(k, radius) of a search: k (default 10 without a radius) or radius
    (with an optional limit), never both; each checked, a ValueError naming
    the value otherwise. ``k`` comes back None for a radius search, and
    ``radius`` None for a k-NN search. The radius comes back as
    check_search_radius returns it: a float, or a float64 array of one
    radius per query, whose length the caller checks once it knows the
    number of queries (radius_for_queries)."""
    if radius is not None:
        if k is not None:
            shown = _radius_shown(radius)
            raise ValueError(f"k is {k!r} and radius is {shown}; give one of them (a "
                             "radius search takes limit to cap its results)")
        radius = check_search_radius(radius)
        if limit is not None:
            check_positive("limit", limit)
        return None, radius
    if limit is not None:
        raise ValueError(f"limit is {limit!r} without a radius; limit caps a radius "
                         "search (give k for the k nearest)")
    k = 10 if k is None else k
    check_positive("k", k)
    if k > MAX_K:
        raise ValueError(f"k is {k}; expected at most {MAX_K:,} (larger k returns "
                         "every live document anyway)")
    return k, None


def checked_candidates(candidates, candidate_roots, k, radius, n_roots):
    """(candidates, roots) of an approximate k-NN search: how many
    candidates, and from how many of the ``n_roots`` searched roots
    (default DEFAULT_CANDIDATE_ROOTS, fewer when fewer are searched); None
    for an exact search. A ValueError naming the value otherwise."""
    if candidates is None:
        if candidate_roots is not None:
            raise ValueError(f"candidate_roots is {candidate_roots!r} without candidates; it "
                             "says how many roots an approximate search (candidates=N) takes "
                             "its candidates from")
        return None
    if radius is not None:
        raise ValueError(f"candidates is {candidates!r} with a radius; candidates are for the "
                         "k nearest (a radius search is always exact)")
    check_positive("candidates", candidates)
    if candidates < k:
        raise ValueError(f"candidates is {candidates}; expected at least k ({k}): the k "
                         "nearest are chosen among the candidates")
    if candidates > MAX_K:
        raise ValueError(f"candidates is {candidates}; expected at most {MAX_K:,}")
    if candidate_roots is None:
        return int(candidates), min(DEFAULT_CANDIDATE_ROOTS, n_roots)
    check_positive("candidate_roots", candidate_roots)
    if candidate_roots > n_roots:
        raise ValueError(f"candidate_roots is {candidate_roots}; expected at most the number "
                         f"of roots searched ({n_roots})")
    return int(candidates), int(candidate_roots)


def check_radius(radius, name="radius"):
    """The radius as a float >= 0 (inf allowed), or a ValueError naming it
    (as ``name``)."""
    if isinstance(radius, bool) or not isinstance(radius, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} is {radius!r}; expected a number >= 0")
    try:
        radius = float(radius)
    except OverflowError:  # an int beyond any float: no finite radius is larger
        radius = math.inf
    if not radius >= 0.0:  # also rejects NaN
        raise ValueError(f"{name} is {radius}; expected a number >= 0 (inf returns every "
                         "document)")
    return radius


def check_search_radius(radius):
    """A search's radius: a number, checked by check_radius (a float comes
    back), or a 1-D list, tuple or array of one radius per query, each a
    number >= 0 (inf allowed), which comes back as a new float64 array; a
    ValueError naming the shape or the first bad value otherwise. The
    number of radii is checked by radius_for_queries."""
    if not isinstance(radius, (list, tuple, np.ndarray)):
        return check_radius(radius)
    try:
        shape = np.shape(radius)
    except ValueError:  # a ragged list
        shape = None
    if shape is None or len(shape) != 1:
        raise ValueError(f"radius is {_radius_shown(radius)}, of shape "
                         f"{'ragged' if shape is None else shape}; expected a number >= 0, "
                         "or a 1-D list or array of one radius per query")
    if isinstance(radius, np.ndarray) and radius.dtype.kind in "iuf":
        out = radius.astype(np.float64)  # a copy: the caller's array may change later
        bad = np.flatnonzero(~(out >= 0.0))  # also NaN
        if len(bad):
            check_radius(out[bad[0]], f"radius[{bad[0]}]")  # raises, naming it
        return out
    return np.array([check_radius(r, f"radius[{i}]") for i, r in enumerate(radius)],
                    dtype=np.float64)


def radius_for_queries(radius, n_queries):
    """``radius`` (as check_search_radius returns it) for ``n_queries``
    queries: a float as it is, an array only if it holds one radius per
    query, else a ValueError saying how many were expected."""
    if isinstance(radius, np.ndarray) and len(radius) != n_queries:
        raise ValueError(f"radius has {len(radius)} value(s) for {n_queries} queries; expected "
                         "one radius per query, or a single number for all of them")
    return radius


def _radius_shown(radius):
    """The radius as an error message names it: short even for many radii."""
    size = radius.size if isinstance(radius, np.ndarray) else (
        len(radius) if isinstance(radius, (list, tuple)) else 0)
    if size > 6:
        return f"a {type(radius).__name__} of {size} values"
    return repr(radius)


def root_positions(roots, n_roots):
    """``roots`` (a position into an index's ``n_roots`` roots, a list of
    them, or None for all) as a list of distinct positions, or a
    ValueError naming it."""
    if roots is None:
        return list(range(n_roots))
    if isinstance(roots, (int, np.integer)) and not isinstance(roots, bool):
        roots = [roots]
    if not isinstance(roots, (list, tuple, np.ndarray)):
        raise ValueError(f"roots is {roots!r}; expected a root position or a list of them "
                         f"(this index has {n_roots} root(s))")
    try:
        positions = [int(r) for r in roots]
    except (TypeError, ValueError):
        positions = []
    if any(isinstance(r, bool) or not isinstance(r, (int, np.integer)) for r in roots):
        positions = []  # 0.5 is not position 0, nor True position 1
    if not positions or any(r < 0 or r >= n_roots for r in positions) \
            or len(set(positions)) != len(positions):
        raise ValueError(
            f"roots is {roots!r}; expected distinct positions in 0..{n_roots - 1} "
            f"(this index has {n_roots} root(s))"
        )
    return positions


def check_where(where):
    """ValueError unless ``where`` is None or a dict with 'label' (a value or
    a list) and/or 'keys' (a list of keys). Checked before any work (a shard
    of a sharded index with none of the wanted labels does not search)."""
    if where is None:
        return
    if not isinstance(where, dict) or not set(where) <= {"label", "keys"}:
        raise ValueError(f"where is {where!r}; expected a dict with 'label' (a value or list) "
                         "and/or 'keys' (a list of keys)")
    if isinstance(where.get("keys"), str):
        raise ValueError(f"where['keys'] is the str {where['keys']!r}; expected a list of keys")


def checked_keys(keys, doc_ids, taken):
    """The keys of a batch of ``len(doc_ids)`` documents: ``keys`` checked
    (a list of non-empty str, one per document, none twice), or without
    keys ``doc-N`` from each document's id, made unique against the live
    keys ``taken(keys)`` returns (a set) by a ``.1``, ``.2``, ... suffix."""
    n = len(doc_ids)
    if keys is None:
        keys = [f"doc-{doc_id}" for doc_id in doc_ids.tolist()]
        used = set(taken(keys))
        for i, doc_id in enumerate(doc_ids.tolist()):
            suffix = 1
            while keys[i] in used:  # a user chose this key already
                keys[i], suffix = f"doc-{doc_id}.{suffix}", suffix + 1
                used |= set(taken([keys[i]]))
    else:
        if isinstance(keys, str):
            raise TypeError("keys must be a list of str, not one str")
        keys = list(keys)
        if len(keys) != n:
            raise ValueError(f"{len(keys)} keys were given for {n} measures; expected one each")
        for i, key in enumerate(keys):
            if not isinstance(key, str) or not key:
                raise ValueError(f"key {i} is {key!r}; keys must be non-empty str")
            check_text(f"key {i}", key)
    seen = set()
    for key in keys:
        if key in seen:
            raise DuplicateKeyError(f"key {key!r} appears twice in this batch")
        seen.add(key)
    return keys


def keys_to_delete(keys):
    """``keys`` of a delete (one str or a list of them) as a list of str, or
    a TypeError naming the value."""
    if isinstance(keys, str):
        keys = [keys]
    try:
        keys = list(keys)
    except TypeError:
        raise TypeError(f"keys is {keys!r}; expected a key (str) or a list of keys") from None
    check_str_keys(keys)
    return keys


def check_str_keys(keys):
    """TypeError unless every one of ``keys`` is a str."""
    for key in keys:
        if not isinstance(key, str):
            raise TypeError(f"key {key!r} is {type(key).__name__}; keys are str")
