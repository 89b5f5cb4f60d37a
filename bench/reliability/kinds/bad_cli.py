"""Bad input through the command line: documents, point sets, queries,
options, keys and SQL that must give one 'Error:' line and leave the index
byte-identical."""
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..harness import cli_error_lines, run_cli
from ..indexes import copy_index, differences, snapshot


def _points_lines(rng, count, prefix="c"):
    return [json.dumps({"key": f"{prefix}{i}", "points": rng.normal(size=(int(rng.integers(2, 6)), 2))
                        .round(6).tolist(), "label": "ab"[i % 2]}) for i in range(count)]


def _text_corpus(rng):
    words = [f"{t}{i}" for t in ("space", "food", "music") for i in range(10)] + ["the", "a", "of"]
    lines = []
    for i in range(40):
        topic = ("space", "food", "music")[i % 3]
        picked = [f"{topic}{j}" for j in rng.integers(0, 10, 6)] + ["the"]
        lines.append(json.dumps({"key": f"t{i}", "text": " ".join(picked), "label": topic}))
    vectors = [f"{len(words)} 4"]
    for w in words:
        centre = {"s": 0, "f": 1, "m": 2}.get(w[0], 3)
        v = rng.normal(scale=0.3, size=4)
        v[centre] += 5
        vectors.append(w + " " + " ".join(f"{x:.5f}" for x in v))
    return "\n".join(lines) + "\n", "\n".join(vectors) + "\n"


GOOD_POINT = '{"key": "good-1", "points": [[0.1, 0.2], [0.3, -0.1]]}'
GOOD_TEXT = '{"key": "good-1", "text": "space1 space2 the"}'

CLI_POINT_LINES = {
    "NaN coordinate": '{"key": "bad", "points": [[0.1, NaN]]}',
    "Infinity coordinate": '{"key": "bad", "points": [[0.1, Infinity]]}',
    "coordinate 1e308 (its square overflows)": '{"key": "bad", "points": [{FAR}]}',
    "coordinate as text": '{"key": "bad", "points": [[0.1, "a"]]}',
    "negative weight": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1, -1]}',
    "NaN weight": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1, NaN]}',
    "Infinity weight": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1, Infinity]}',
    "weights whose total overflows":
        '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1e308, 1e308]}',
    "subnormal weights (1e-320)":
        '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1e-320, 1e-320]}',
    "weights totalling 6e-301": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [3e-301, 3e-301]}',
    "weights all zero": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [0, 0]}',
    "fewer weights than points": '{"key": "bad", "points": [[0.1, 0.2], [1, 1]], "weights": [1]}',
    "no points": '{"key": "bad", "points": []}',
    "points of the wrong dimension": '{"key": "bad", "points": [[0.1, 0.2, 0.3]]}',
    "ragged points": '{"key": "bad", "points": [[0.1, 0.2], [0.3]]}',
    "no key": '{"points": [[0.1, 0.2]]}',
    "a key that is a fraction": '{"key": 1.5, "points": [[0.1, 0.2]]}',
    "an empty key": '{"key": "", "points": [[0.1, 0.2]]}',
    "a key repeated in the file": '{"key": "good-1", "points": [[0.1, 0.2]]}',
    "a key already in the index": '{"key": "c1", "points": [[0.1, 0.2]]}',
    "a label that is an object": '{"key": "bad", "points": [[0.1, 0.2]], "label": {"a": 1}}',
    "NaN in an extra field": '{"key": "bad", "points": [[0.1, 0.2]], "extra": NaN}',
    "a line that is not JSON": '{"key": "bad", "points": [[0.1, 0.2]',
    "a JSON array instead of an object": '[1, 2, 3]',
    "bytes that are not UTF-8": b'{"key": "bad\xff", "points": [[0.1, 0.2]]}',
}
CLI_TEXT_LINES = {
    "NaN in a field": '{"key": "bad", "text": "space1 food2", "x": NaN}',
    "-Infinity in a field": '{"key": "bad", "text": "space1 food2", "x": [1, -Infinity]}',
    "no known word": '{"key": "bad", "text": "zzzz qqqq"}',
    "text that is a number": '{"key": "bad", "text": 123}',
    "no text": '{"key": "bad"}',
    "a key that is a list": '{"key": [1], "text": "space1"}',
    "a key repeated in the file": '{"key": "good-1", "text": "space1"}',
    "a key already in the index": '{"key": "t1", "text": "space1"}',
    "a label that is an object": '{"key": "bad", "text": "space1", "label": {"a": 1}}',
    "a line that is not JSON": '{"key": "bad", "text": "space1"',
    "bytes that are not UTF-8": b'{"key": "bad", "text": "space1 \xff\xfe"}',
}
CLI_QUERY_LINES = ["NaN coordinate", "subnormal weights (1e-320)", "no points",
                   "a line that is not JSON", "coordinate 1e308 (its square overflows)"]
CLI_OPTIONS = {
    "search -k 0": ["search", "{INDEX}", "--key", "c1", "-k", "0"],
    "search -k -1": ["search", "{INDEX}", "--key", "c1", "-k", "-1"],
    "search -k 2.5": ["search", "{INDEX}", "--key", "c1", "-k", "2.5"],
    "search -k 10**30": ["search", "{INDEX}", "--key", "c1", "-k", str(10**30)],
    "search -p 0.5": ["search", "{INDEX}", "--key", "c1", "-p", "0.5"],
    "search -p 0": ["search", "{INDEX}", "--key", "c1", "-p", "0"],
    "search -p -1": ["search", "{INDEX}", "--key", "c1", "-p", "-1"],
    "search -p nan": ["search", "{INDEX}", "--key", "c1", "-p", "nan"],
    "search -p abc": ["search", "{INDEX}", "--key", "c1", "-p", "abc"],
    "search --roots 5": ["search", "{INDEX}", "--key", "c1", "--roots", "5"],
    "search --roots 0,0": ["search", "{INDEX}", "--key", "c1", "--roots", "0,0"],
    "search --roots x": ["search", "{INDEX}", "--key", "c1", "--roots", "x"],
    "search --key of an unknown key": ["search", "{INDEX}", "--key", "nope"],
    "get of an unknown key": ["get", "{INDEX}", "nope"],
    "delete of an unknown key": ["delete", "{INDEX}", "c1", "nope"],
    "distance to an unknown key": ["distance", "{INDEX}", "c1", "nope"],
    "distance -p 0": ["distance", "{INDEX}", "c1", "c2", "-p", "0"],
    "gram to a .txt file": ["gram", "{INDEX}", "{TMP}/m.txt", "--keys", "c1", "--keys", "c2"],
    "gram --kernel nan": ["gram", "{INDEX}", "{TMP}/m.npy", "--keys", "c1", "--keys", "c2",
                          "--kernel", "nan"],
    "gram of an unknown key": ["gram", "{INDEX}", "{TMP}/m.npy", "--keys", "c1", "--keys", "nope"],
    "sql DELETE": ["sql", "{INDEX}", "DELETE FROM documents"],
    "sql ATTACH": ["sql", "{INDEX}", "ATTACH DATABASE '{TMP}/x.db' AS x"],
    "sql PRAGMA writable_schema": ["sql", "{INDEX}", "PRAGMA writable_schema = 1"],
    "sql of an unknown table": ["sql", "{INDEX}", "SELECT * FROM nope"],
    "sql sobolev_knn with k 0": ["sql", "{INDEX}", "SELECT sobolev_knn('c1', 0)"],
    "sql sobolev_distance with p 'abc'": ["sql", "{INDEX}", "SELECT sobolev_distance('c1', 'c2', 'abc')"],
    "sql --timeout -1": ["sql", "{INDEX}", "SELECT 1", "--timeout", "-1"],
    "build into an existing index": ["build", "{INDEX}", "--points", "{TMP}/clouds.jsonl", "--nodes", "5"],
    "add of a missing file": ["add", "{INDEX}", "{TMP}/missing.jsonl"],
    "verify of a file that is not an index": ["verify", "{TMP}/clouds.jsonl"],
}


def _far_point(index_path):
    """A point at +-1e308 in each coordinate whose nearest node is not node 0
    (so that an overflow, which makes every distance inf or NaN and so picks
    node 0, shows), that nearest node, computed exactly with fractions, and
    its coordinates."""
    from fractions import Fraction

    from sobolev_index import SobolevIndex

    with SobolevIndex.open(index_path) as index:
        coords = np.asarray(index.graph.coords, dtype=np.float64)
    exact = [[Fraction(float(x)) for x in row] for row in coords]
    for signs in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
        point = [Fraction(sign * 1e308) for sign in signs]
        squared = [sum((x - y) ** 2 for x, y in zip(row, point)) for row in exact]
        nearest = min(range(len(squared)), key=squared.__getitem__)
        if nearest != 0:
            return [sign * 1e308 for sign in signs], nearest, coords[nearest].tolist()
    return [1e308, 1e308], 0, coords[0].tolist()


def _overflow_accepted(name, index, far, args, cwd):
    """Whether an accepted point at 1e308 was treated right: stored on its
    nearest node (add), or searched as that node (search)."""
    from sobolev_index import SobolevIndex

    point, nearest, node_coords = far
    if name.startswith("add"):
        with SobolevIndex.open(index) as opened:
            if "bad" not in opened:
                return False, "accepted, yet the document is not in the index"
            node = int(opened.get("bad")["nodes"][0])
        return node == nearest, f"the point {point} went to node {node}; its nearest node is {nearest}"
    # search: the same query with the point moved onto its nearest node must give the same answer
    reference = os.path.join(cwd, "reference.jsonl")
    with open(reference, "w") as handle:
        handle.write(GOOD_POINT + "\n" + json.dumps({"key": "bad", "points": [node_coords]}) + "\n")
    file_at = args.index("--file") + 1
    got = run_cli(args + ["--json"], cwd)[1]
    want = run_cli(args[:file_at] + [reference] + args[file_at + 1:] + ["--json"], cwd)[1]
    return got == want, (f"the query at {point} was answered "
                         f"{'like' if got == want else 'unlike'} a query on its nearest node {nearest}")


def kind_bad_cli(run):
    """Bad documents, point sets, options, keys and SQL through the command line."""
    expected = ("exit status 1 (2 for a usage error), one 'Error:' line, no traceback; index "
                "byte-identical")
    ok = ["one clear error, unchanged"]
    rows = {
        "bad-input-cli": run.row(
            "bad-input-cli", "bad-cli", "Bad documents and point sets (CLI)",
            "`add --batch-size 1` of a file whose first line is good and second line bad, on a "
            "point-cloud and a text index, and `search --file` of bad queries: {cases}",
            expected + "; the good line is not added either (a coordinate whose square overflows "
            "may instead be accepted if the point goes to its nearest node)",
            ok + ["accepted, nearest node"]),
        "bad-options-cli": run.row(
            "bad-options-cli", "bad-cli", "Bad options, keys and SQL (CLI)",
            "{cases}", expected, ok),
    }
    started = time.monotonic()
    base = run.dir("cli")
    rng = np.random.default_rng(run.seed)
    with open(os.path.join(base, "clouds.jsonl"), "w") as handle:
        handle.write("\n".join(_points_lines(rng, 30)) + "\n")
    corpus, vectors = _text_corpus(rng)
    with open(os.path.join(base, "corpus.jsonl"), "w") as handle:
        handle.write(corpus)
    with open(os.path.join(base, "vectors.vec"), "w") as handle:
        handle.write(vectors)
    templates = {"points": os.path.join(base, "points-index"), "text": os.path.join(base, "text-index")}
    for argv in (["build", templates["points"], "--points", "clouds.jsonl", "--nodes", "12", "--roots",
                  "2", "--silent"],
                 ["build", templates["text"], "--corpus", "corpus.jsonl", "--vectors", "vectors.vec",
                  "--nodes", "8", "--roots", "2", "--silent"]):
        status, out, err, _ = run_cli(argv, cwd=base)
        if status != 0:
            raise RuntimeError(f"building a CLI template failed: {err}")
    far = _far_point(templates["points"])
    cases = []
    point_names = run.subset(CLI_POINT_LINES, 2)
    text_names = run.subset(CLI_TEXT_LINES, 1)
    query_names = run.subset(CLI_QUERY_LINES, 1)
    option_names = run.subset(CLI_OPTIONS, 2)
    for name in point_names:
        cases.append(("bad-input-cli", f"add (points): {name}", "points",
                      ["add", "{INDEX}", "{FILE}", "--batch-size", "1", "--silent"],
                      [GOOD_POINT, CLI_POINT_LINES[name]]))
    for name in text_names:
        cases.append(("bad-input-cli", f"add (text): {name}", "text",
                      ["add", "{INDEX}", "{FILE}", "--batch-size", "1", "--vectors", "none", "--silent"],
                      [GOOD_TEXT, CLI_TEXT_LINES[name]]))
    for name in query_names:
        cases.append(("bad-input-cli", f"search --file: {name}", "points",
                      ["search", "{INDEX}", "--file", "{FILE}"], [GOOD_POINT, CLI_POINT_LINES[name]]))
    for name in option_names:
        cases.append(("bad-options-cli", name, "points", CLI_OPTIONS[name], None))
    rows["bad-input-cli"].injection = rows["bad-input-cli"].injection.format(
        cases="; ".join(name for row_id, name, *rest in cases if row_id == "bad-input-cli"))
    rows["bad-options-cli"].injection = rows["bad-options-cli"].injection.format(
        cases="; ".join(f"`{' '.join(a for a in CLI_OPTIONS[n] if a != '{INDEX}')}`"
                        for n in option_names))
    local = threading.local()
    lock = threading.Lock()

    def work(case):
        row_id, name, kind, argv, lines = case
        if not hasattr(local, "dir"):
            with lock:
                local.dir = tempfile.mkdtemp(prefix="w", dir=base)
                local.fresh = {}
        index = os.path.join(local.dir, kind)
        if not local.fresh.get(kind):
            copy_index(templates[kind], index)
            local.fresh[kind] = True
        file_path = os.path.join(local.dir, "input.jsonl")
        if lines is not None:
            with open(file_path, "wb") as handle:
                for line in lines:
                    if isinstance(line, str):
                        line = line.replace("{FAR}", json.dumps(far[0])).encode()
                    handle.write(line)
                    handle.write(b"\n")
        args = [a.replace("{INDEX}", index).replace("{FILE}", file_path).replace("{TMP}", base)
                for a in argv]
        before = snapshot(index)
        status, out, err, seconds = run_cli(args, cwd=local.dir)
        changed = differences(before, snapshot(index))
        if changed:
            local.fresh[kind] = False
        errors = cli_error_lines(err)
        shown = " ".join(err.split())[:300]
        if "Traceback" in err:
            return row_id, "traceback", f"{name}: {err[-600:]}"
        if status == 0:
            if "1e308" in name:
                fine, detail = _overflow_accepted(name, index, far, args, local.dir)
                return row_id, ("accepted, nearest node" if fine else "accepted, wrong node"), \
                    f"{name}: {detail}; stderr: {shown}"
            return row_id, "accepted", f"{name}: exit 0; stdout {out[:120]!r}"
        if status not in (1, 2):
            return row_id, f"exit status {status}", f"{name}: {shown}"
        if len(errors) != 1:
            return row_id, "not one 'Error:' line", f"{name}: {shown}"
        if changed:
            return row_id, "index changed", f"{name}: {changed}; {shown}"
        return row_id, "one clear error, unchanged", f"{name}: {errors[0][:200]}"

    done = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for row_id, outcome, detail in pool.map(work, cases):
            rows[row_id].add(outcome, detail)
            done += 1
            if done % 10 == 0:
                run.log(f"    cli: {done}/{len(cases)}")
    run.finish(rows.values(), started)
