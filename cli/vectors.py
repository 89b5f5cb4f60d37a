"""``sobolev-index vectors``: word vectors learned from a corpus itself
(:func:`sobolev_index.ingest.learn.learn_vectors`), for a corpus that has
none of its own."""
import click

from ._common import (
    _echo_json,
    _encoding_option,
    _format_option,
    _json_option,
    _note,
    _progress,
    _silent_option,
)
from .params import columns, columns_options

__all__ = ["vectors", "learned_text"]


@click.command()
@click.argument("paths", nargs=-1, metavar="CORPUS... OUT")
@click.option("--dim", default=100, show_default=True, type=click.IntRange(1),
              help="Dimensions of the vectors (lowered, with a note, when the corpus has too "
                   "few words).")
@click.option("--min-count", default=2, show_default=True, type=click.IntRange(1),
              help="Only words seen at least this many times get a vector.")
@click.option("--window", default=5, show_default=True, type=click.IntRange(1),
              help="Words at most this many words apart count as each other's context.")
@click.option("--token-pattern", default="unicode", show_default=True,
              metavar="unicode|ascii|REGEX",
              help="How text becomes words: give the one `build --token-pattern` will use.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the SVD.")
@_format_option
@columns_options
@_encoding_option
@_silent_option
@_json_option
def vectors(paths, dim, min_count, window, token_pattern, seed, corpus_format,
            key_column, text_column, label_column, encoding, silent, as_json):
    """Learn word vectors from CORPUS (files, directories or '-') and write
    them to OUT, a new file: word2vec binary for .bin, word2vec text for
    .vec or .txt (.gz compresses).

    For a corpus with no word vectors of its own: co-occurrences within
    --window words, weighted by positive pointwise mutual information, and
    reduced to --dim dimensions by a truncated SVD. Then `sobolev-index
    build INDEX --corpus CORPUS --vectors OUT` (or, in one step, `build
    --vectors learn`). Words seen fewer than --min-count times get no
    vector and are left out of the documents.
    """
    from ..ingest.learn import (
        check_vectors_output,
        learn_vectors,
        nearest_words,
        vector_output_format,
        write_vectors,
    )
    from ..ingest.pipelines import read_documents
    from ..ingest.text import ENGLISH_STOPWORDS, check_token_pattern

    if len(paths) < 2:
        raise click.UsageError("give the corpus (files, directories or '-') and then OUT, the "
                               "new vector file to write (.bin, .vec or .txt)"
                               + (f"; only {paths[0]!r} was given" if paths else ""))
    *corpus, output = paths
    try:
        vector_output_format(output)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="OUT") from None
    check_vectors_output(output)  # exists, or no such folder: an error, not a usage error
    check_token_pattern(token_pattern)
    progress = _progress(silent)
    try:
        documents = read_documents(corpus, corpus_format, encoding,
                                   columns(key_column, text_column, label_column))
        learned, report = learn_vectors(documents, dim=dim, window=window, min_count=min_count,
                                        pattern=token_pattern, seed=seed, progress=progress)
    finally:
        progress.finish()
    report["path"] = write_vectors(output, learned)
    # A few frequent words besides stop words and their nearest words: a
    # glance at whether the vectors make sense.
    shown = [w for w in learned.words if w not in ENGLISH_STOPWORDS and len(w) > 2][:3]
    report["nearest_words"] = {w: [n for n, _ in nearest_words(learned, w, n=4)] for w in shown}
    if as_json:
        _echo_json(report)
        return
    click.echo(f"{learned_text(report)} -> {output}")
    if report["nearest_words"]:
        click.echo("  nearest words: " + "; ".join(
            f"{w} -> {', '.join(n)}" for w, n in report["nearest_words"].items()))
    if report["zero_vectors"]:
        _note(f"note: {report['zero_vectors']:,} words seen often enough got no vector: none of "
              "their contexts is in the kept dimensions", silent)
    if report["words"] < 1000:
        _note(f"note: vectors of {report['words']:,} words learned from {report['tokens']:,} "
              "tokens are rough; a larger corpus, or pretrained vectors, give better neighbours",
              silent)


def learned_text(learned):
    """One line on vectors learned from a corpus (a learn report)."""
    lowered = (f" (lowered from {learned['dim_asked']}: too few words)"
               if learned["dim"] < learned["dim_asked"] else "")
    return (f"learned {learned['words']:,} words x {learned['dim']} dims{lowered} from "
            f"{learned['documents']:,} documents (PPMI + SVD; words seen at least "
            f"{learned['min_count']} times, window {learned['window']}; "
            f"{learned['seconds']:.1f} s)")
