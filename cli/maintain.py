"""Commands that look after an index: ``info``, ``delete``, ``compact``,
``upgrade``, ``verify`` and ``recover``."""
import sys
import time

import click

from ._common import (
    _cli_words,
    _echo_json,
    _json_option,
    _open,
    _open_any,
    _opened,
    _recipe_text,
    _refuse_shard_writes,
    _scheduler_option,
    _sharded,
    _table,
    _wait_option,
)


@click.command()
@click.argument("index", type=click.Path())
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@_json_option
@_wait_option
def delete(index, keys, as_json, wait):
    """Delete documents by key (all or none; on a sharded index each shard
    deletes its keys on its own)."""
    with _open_any(index, "a", timeout=wait) as opened:
        count = opened.delete(list(keys))
        left = len(opened)
    if as_json:
        _echo_json({"deleted": count, "documents": left})
    else:
        click.echo(f"deleted {count} document(s); {left:,} left")


@click.command()
@click.argument("index", type=click.Path())
@_json_option
@_wait_option
def compact(index, as_json, wait):
    """Merge the segments and drop deleted documents.

    Into one segment; past 2^27 nonzero features, runs of segments up to
    that per-segment cap, which bounds a merge's memory."""
    started = time.perf_counter()
    with _open_any(index, "a", timeout=wait) as opened:
        before = opened.info()
        opened.compact()
    # After close: the catalog's log is folded in. (Any unlisted files were
    # reported by the first open.)
    with _open_any(index, quiet_unlisted=True) as opened:
        after = opened.info()
    out = {"segments_before": before["segments"], "segments": after["segments"],
           "deleted_dropped": before["deleted"], "bytes_before": before["bytes"],
           "bytes": after["bytes"], "seconds": round(time.perf_counter() - started, 3)}
    if as_json:
        _echo_json(out)
    else:
        click.echo(f"compacted: {out['segments_before']} -> {out['segments']} segment(s), "
                   f"{out['deleted_dropped']} deleted document(s) dropped, "
                   f"{out['bytes_before'] / 1e6:.1f} -> {out['bytes'] / 1e6:.1f} MB")


@click.command()
@click.argument("index", type=click.Path())
@_json_option
@_wait_option
def upgrade(index, as_json, wait):
    """Rewrite an index written by an older release in this release's format.

    A sharded index is rewritten shard by shard. Releases older than this
    one cannot read the index afterwards. Safe to interrupt: run it again
    to finish."""
    from ..distributed.opening import upgrade_index

    _refuse_shard_writes(index)
    started = time.perf_counter()
    out = upgrade_index(index, timeout=wait)
    out["seconds"] = round(time.perf_counter() - started, 3)
    if as_json:
        _echo_json(out)
    elif out["from_version"] == out["to_version"] and not out["segments_rewritten"]:
        click.echo(f"already in format {out['to_version']}; nothing to do")
    else:
        click.echo(f"upgraded from format {out['from_version']} to {out['to_version']}: "
                   f"{out['segments_rewritten']} segment(s) rewritten, "
                   f"{out['documents']:,} documents")


@click.command()
@click.argument("index", type=click.Path())
@click.option("--repair", is_flag=True,
              help="Remove temporary and merged-away files; move segment files no commit lists "
                   "to INDEX/lost+found/.")
@_json_option
@_wait_option
def verify(index, repair, as_json, wait):
    """Check checksums, the catalog and a sample of features; exit 1 if a problem is found.

    Works on an index that cannot be opened (a missing or damaged file)."""
    from .. import SobolevIndex

    if _sharded(index):
        return _verify_sharded(index, repair, as_json, wait)
    if repair:
        _refuse_shard_writes(index)
    report = SobolevIndex.verify_path(index, repair=repair, timeout=wait)
    if as_json:
        _echo_json(report)
    else:
        state = "ok" if report["ok"] else "PROBLEMS FOUND"
        if report["documents"] is None:
            click.echo(f"{state}: the catalog could not be read in full")
        else:
            click.echo(f"{state}: {report['documents']:,} documents in {report['segments']} "
                       f"segment(s), {report['checked_rows']} rows recomputed")
        for problem in report["problems"]:
            click.echo(f"  problem: {_cli_words(problem)}")
        for orphan in report["orphans"]:
            click.echo(f"  orphan file: {orphan}" + (" (removed)" if orphan in report["repaired"]
                                                     else ""))
        for entry in report["unlisted"]:
            if entry.get("moved_to"):
                held = ("unreadable" if entry["documents"] is None
                        else f"{entry['documents']:,} document(s)")
                click.echo(f"  segment not in the catalog: {entry['file']} ({held}), moved to "
                           f"{entry['moved_to']}")
    if not report["ok"]:
        sys.exit(1)


@click.command()
@click.argument("index", type=click.Path())
@click.option("--dry-run", is_flag=True,
              help="Report what would be restored; move and add nothing.")
@click.option("--replace-newer", is_flag=True,
              help="Where a key is live but its lost version was added later, replace the live "
                   "document with the lost one (default: keep the live one, and say so).")
@_json_option
@_wait_option
def recover(index, dry_run, replace_newer, as_json, wait):
    """Add again the documents of segment files no commit lists.

    After the catalog lost commits (a deleted catalog.sqlite-wal), their
    segment files stay in INDEX/segments/ (open warns) or were moved to
    INDEX/lost+found/ by verify --repair. This moves the first kind there,
    then adds each document of lost+found/ whose key is not live, as a new
    document. Left out: documents the catalog still has (or deleted since),
    live keys (unless --replace-newer and the lost version is newer), older
    versions. The files read then move to lost+found/recovered/; nothing is
    removed. A write killed before its commit leaves such a file too: its
    documents, never acknowledged, are restored as well. Lists each key
    restored or left out, and why.
    """
    if _sharded(index):
        raise click.ClickException(
            f"{index} is a sharded index; recover works on one index at a time, and a "
            "document restored into a shard directly would bypass the sharded index's routing "
            "(hint: verify the sharded index; restore a shard from a backup)")
    _refuse_shard_writes(index)
    with _open(index, "a", timeout=wait, quiet_unlisted=True) as opened:
        report = opened.recover(dry_run=dry_run, replace_newer=replace_newer)
        report["documents"] = len(opened)
    if as_json:
        _echo_json(report)
        return
    verb = "would restore" if dry_run else "restored"
    for entry in report["restored"]:
        how = ", replacing the live one" if entry["replaced"] else ""
        click.echo(f"{verb} {entry['key']} (id {entry['id']} in {entry['file']}{how})")
    for entry in report["skipped"]:
        what = entry["key"] if entry["key"] is not None else f"document id {entry['id']}"
        click.echo(f"left out {what} ({entry['file']}): {entry['reason']}")
    for entry in report["unreadable"]:
        click.echo(f"could not read {entry['file']}: {_cli_words(entry['reason'])}")
    if report["moved"]:
        click.echo(f"moved {len(report['moved'])} unlisted segment file(s) to lost+found/")
    click.echo(f"{verb} {len(report['restored']):,} document(s), left out "
               f"{len(report['skipped']):,}, from {len(report['files'])} file(s); "
               f"{report['documents']:,} in the index")
    if report["unreadable"]:
        sys.exit(1)


def _verify_sharded(index, repair, as_json, wait):
    """verify on a sharded index: every shard, and its agreement with the
    manifest. A shard that cannot be opened stops it with an error naming
    the shard (verify that shard's directory on its own)."""
    with _opened(index, "a" if repair else "r", timeout=wait) as opened:
        report = opened.verify(repair=repair)
    if as_json:
        _echo_json(report)
    else:
        state = "ok" if report["ok"] else "PROBLEMS FOUND"
        documents = "?" if report["documents"] is None else f"{report['documents']:,}"
        click.echo(f"{state}: {documents} documents in {len(report['shards'])} shards")
        for problem in report["problems"]:
            click.echo(f"  problem: {_cli_words(problem)}")
    if not report["ok"]:
        sys.exit(1)


@click.command()
@click.argument("index", type=click.Path())
@_json_option
@_scheduler_option
def info(index, as_json, scheduler):
    """Counts, graph, roots, segments and size on disk; for a sharded
    index, also each shard's."""
    from ..ingest.pipelines import index_details

    with _open_any(index, scheduler=scheduler) as opened:
        out = index_details(opened)
    if as_json:
        _echo_json(out)
        return
    rows = [["documents", f"{out['documents']:,}"], ["deleted", f"{out['deleted']:,}"],
            ["segments", out["segments"]], ["nodes", f"{out['nodes']:,}"],
            ["edges", f"{out['edges']:,}"], ["roots", ", ".join(map(str, out["roots"]))],
            ["default p", out["p"]], ["bytes", f"{out['bytes']:,}"]]
    older = out.get("segments_in_older_format", 0)
    if older:
        rows.append(["format", f"{out['format_version']}, {older} segment(s) in an older "
                               "format: `sobolev-index upgrade INDEX` rewrites them"])
    if out.get("words") is not None:
        rows += [["words", f"{out['words']:,}"], ["weighting", out["weighting"]],
                 ["stopwords", f"{out['stopwords']:,}"], ["tokens", out["token_pattern"]]]
    rows.append(["recipe", _recipe_text(out.get("recipe"))])
    if "shards" in out:
        rows.append(["shards", len(out["shards"])])
    click.echo(_table(["", out["path"]], rows))
    if "shards" in out:
        # Each shard's own files; the total adds the manifest.
        click.echo("")
        click.echo(_table(
            ["shard", "documents", "deleted", "segments", "bytes", "path"],
            [[s["shard"], f"{s['documents']:,}", f"{s['deleted']:,}", s["segments"],
              f"{s['bytes']:,}", s["path"]] for s in out["shards"]]
            + [["total", f"{out['documents']:,}", f"{out['deleted']:,}", out["segments"],
                f"{out['bytes']:,}", ""]]))
