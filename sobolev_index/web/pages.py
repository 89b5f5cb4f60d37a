"""What the web pages show, as plain data: the search page's results and
the document page's fields, neighbours and explanations. The same dicts
are the pages' JSON; the templates (``templates.py``) only lay them out.

Nothing here imports Datasette. Every function takes an index opened for
reading and calls the Python API (``SobolevIndex.search``, ``get``,
``explain``; ``ingest.pipelines.query_measures`` for a query), so the web
view answers exactly what the API answers.
"""
import io
import math
import os
import tempfile
import warnings

from ..distances import check_p
from ..errors import KeyNotFoundError, SobolevIndexError

__all__ = ["WebInputError", "MAX_K", "DEFAULT_K", "EXPLAIN_TOP", "EXPLAINED", "parse_k",
           "parse_p", "search_page", "document_page", "explain_page", "json_value"]

# The most rows a page lists: a longer table is not read by anyone, and a
# program that wants more uses the API or SQL.
MAX_K = 1000
DEFAULT_K = 10
# Subtrees (explain's groups: one per node, over every root's tree) shown
# in each neighbour's explanation, and words per side.
EXPLAIN_TOP = 5
EXPLAIN_WORDS = 5
# Neighbours explained on the document page: each explanation costs about
# as much as a distance over every edge, and the page holds the index
# while it is made. The others link to their explanation (explain_page).
EXPLAINED = 20
# Characters of a document's text in a result row.
SNIPPET = 160
# The largest point-set upload read, in bytes.
MAX_UPLOAD = 20 << 20


class WebInputError(ValueError):
    """A request's parameter is not usable; the page says why (status 400,
    or 404 for a key that is not in the index)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def parse_k(value, default=DEFAULT_K):
    """k from a query string: a whole number from 1 to :data:`MAX_K`."""
    if value is None or str(value).strip() == "":
        return default
    text = str(value).strip()
    expected = f"expected a whole number from 1 to {MAX_K:,}"
    try:
        k = int(text)
    except ValueError:
        raise WebInputError(f"k is {text!r}; {expected}") from None
    if not 1 <= k <= MAX_K:
        raise WebInputError(f"k is {k:,}; {expected}")
    return k


def parse_p(value):
    """p from a query string: None (the index's default) when empty, else
    a number >= 1 or "inf"."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    try:
        number = float(text) if text.lower() not in ("inf", "infinity") else math.inf
        if math.isinf(number) and text.lower() not in ("inf", "infinity", "+inf", "+infinity"):
            # 1e400 overflows to inf: a finite number was meant.
            raise ValueError(text)
        return check_p(number)
    except ValueError:
        raise WebInputError(f"p is {text!r}; expected a number >= 1 or 'inf'") from None


def json_value(value):
    """``value`` with NumPy scalars and arrays as Python numbers and lists,
    and infinite p as "inf" (JSON has no infinity)."""
    import numpy as np

    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, np.ndarray):
        return [json_value(v) for v in value.tolist()]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return "inf" if math.isinf(value) else value
    return value


def _p_value(p):
    return "inf" if math.isinf(p) else p


def _snippet(text, width=SNIPPET):
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _stored_text(doc):
    fields = doc.get("fields") or {}
    text = fields.get("text") if isinstance(fields, dict) else None
    return text if isinstance(text, str) else None


def _texts_of(index, keys):
    return {key: _stored_text(index.get(key)) for key in keys}


def _library_errors():
    """The errors a request can cause with its input: they become a 400 page
    naming the value, never a server error."""
    return (SobolevIndexError, ValueError, OSError)


def _query_measures(index, kind, text, upload):
    """Measures and names of the request's queries, through the same call as
    ``sobolev-index search`` (``ingest.pipelines.query_measures``)."""
    from ..ingest.pipelines import query_measures

    if kind in ("clouds", "diagrams"):
        if upload is None:
            return [], []
        name, data = upload
        if len(data) > MAX_UPLOAD:
            raise WebInputError(f"the upload {name!r} has {len(data):,} bytes; expected at most "
                                f"{MAX_UPLOAD:,}")
        if kind == "clouds":
            stream = io.BytesIO(data)
            stream.name = name or "upload.jsonl"
            return query_measures(index, files=[stream])
        # Diagrams are read from files by their suffix: the upload goes to a
        # temporary file of its own name, removed at once.
        suffix = os.path.splitext(name or "")[1] or ".csv"
        with tempfile.TemporaryDirectory(prefix="sobolev-web-") as folder:
            path = os.path.join(folder, "query" + suffix)
            with open(path, "wb") as handle:
                handle.write(data)
            return query_measures(index, files=[path])
    if text is None or not text.strip():
        return [], []
    return query_measures(index, texts=[text])


def search_page(index, kind, text=None, upload=None, k=DEFAULT_K, p=None):
    """The search page's data: the k nearest documents of each query (the
    text of a text index, or each point set of an upload for a point
    index), as ``index.search`` finds them.

    Returns {"kind", "documents", "k", "p", "query", "queries": [{"query",
    "results": [{"rank", "distance", "key", "label", "text"}]}],
    "warnings"}; no query gives an empty "queries" list (the form alone).
    Bad input raises :class:`WebInputError`."""
    used_p = index.p if p is None else p
    out = {"kind": kind, "documents": len(index), "k": k, "p": _p_value(used_p),
           "query": text if kind not in ("clouds", "diagrams") else None,
           "queries": [], "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            measures, names = _query_measures(index, kind, text, upload)
            if not measures:
                return out
            result = index.search(measures, k=k, p=p)
        except WebInputError:
            raise
        except _library_errors() as exc:
            raise WebInputError(str(exc)) from None
    out["warnings"] = list(dict.fromkeys(str(w.message) for w in caught))
    records = result.to_records()
    texts = _texts_of(index, {hit["key"] for hits in records for hit in hits})
    for name, hits in zip(names, records):
        out["queries"].append({"query": name, "results": [
            {"rank": rank, "distance": hit["distance"], "key": hit["key"], "label": hit["label"],
             "text": _snippet(texts.get(hit["key"]))}
            for rank, hit in enumerate(hits, 1)]})
    return out


def document_page(index, key, k=DEFAULT_K, p=None, explain_top=EXPLAIN_TOP,
                  explained=EXPLAINED):
    """The document page's data: the stored document ``key`` (label, fields,
    text, support size), its k nearest other documents
    (``index.neighbours``), and for each of the first ``explained``
    neighbours ``index.explain(key, neighbour)`` with its ``explain_top``
    largest subtrees (its ``groups``, which the page shows; the dict also
    carries the top (root, edge) pairs, ``edges``), None for the others:
    see :func:`explain_page`.

    Returns {"key", "label", "added_at", "supports", "fields", "text",
    "documents", "k", "p", "neighbours": [{"rank", "distance", "key",
    "label", "text", "explanation"}]}. A key that is not live raises
    :class:`WebInputError` with status 404."""
    if key is None or key == "":
        raise WebInputError("give a document: key=KEY")
    try:
        doc = index.get(key)
        found = index.neighbours(key, k=k, p=p)
        used_p = index.p if p is None else p
        hits = found.to_records()[0]
        texts = _texts_of(index, [hit["key"] for hit in hits])
        neighbours = []
        for rank, hit in enumerate(hits, 1):
            explanation = None
            if rank <= explained:
                explanation = json_value(index.explain(
                    key, hit["key"], p=p, top=explain_top, n_words=EXPLAIN_WORDS).to_dict())
            neighbours.append({"rank": rank, "distance": hit["distance"], "key": hit["key"],
                               "label": hit["label"], "text": _snippet(texts.get(hit["key"])),
                               "explanation": explanation})
    except KeyNotFoundError:
        raise WebInputError(f"key {key!r} is not in the index", status=404) from None
    except _library_errors() as exc:
        raise WebInputError(str(exc)) from None
    fields = doc.get("fields") if isinstance(doc.get("fields"), dict) else {}
    return {"key": key, "label": doc["label"], "added_at": doc["added_at"],
            "supports": int(len(doc["nodes"])),
            "fields": {name: value for name, value in fields.items() if name != "text"},
            "text": _stored_text(doc), "documents": len(index), "k": k,
            "p": _p_value(used_p), "neighbours": neighbours}


def explain_page(index, a, b, p=None, explain_top=EXPLAIN_TOP):
    """Why two stored documents are as far apart as they are:
    ``index.explain(a, b)`` with its ``explain_top`` largest subtrees (its
    ``groups``), for a neighbour the document page does not explain itself.

    Returns {"a", "b", "p", "distance", "explanation"}; a key that is not
    live raises :class:`WebInputError` with status 404."""
    for name, value in (("a", a), ("b", b)):
        if value is None or value == "":
            raise WebInputError(f"give two documents: a=KEY&b=KEY ({name} is missing)")
    try:
        explanation = index.explain(a, b, p=p, top=explain_top, n_words=EXPLAIN_WORDS).to_dict()
    except KeyNotFoundError as exc:
        raise WebInputError(str(exc), status=404) from None
    except _library_errors() as exc:
        raise WebInputError(str(exc)) from None
    explanation = json_value(explanation)
    return {"a": a, "b": b, "p": _p_value(index.p if p is None else p),
            "distance": explanation["distance"], "explanation": explanation}
