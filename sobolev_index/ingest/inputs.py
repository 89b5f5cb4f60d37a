"""Input paths that are not regular files: pipes, FIFOs, ``/dev/stdin``.

Such a file can be read once, from its start, and cannot seek. The corpus
readers stream it once (they guess its format from lines they keep). The
readers that must seek or open a file twice (word vectors, ``.npy``
arrays) read it through :func:`regular_file`, which copies the stream once
into a temporary file and hands that on; errors then name the path the
user gave, not the copy.
"""
import contextlib
import os
import shutil
import stat
import tempfile

__all__ = ["is_stream", "regular_file"]

# Bytes copied per read from a stream into its temporary copy.
_CHUNK = 1 << 20


def is_stream(path):
    """Whether ``path`` names something that exists and is neither a
    regular file nor a directory: a FIFO, a character device such as
    ``/dev/stdin``, a socket."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError, TypeError):
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _named_as_given(exc, copy, given):
    """``exc`` with the temporary copy's path replaced by the one given, in
    its message and its ``filename``."""
    exc.args = tuple(arg.replace(copy, given) if isinstance(arg, str) else arg
                     for arg in exc.args)
    if isinstance(exc, OSError) and exc.filename == copy:
        exc.filename = given
    return exc


@contextlib.contextmanager
def regular_file(path):
    """A path to a regular file with the content of ``path``: ``path``
    itself when it is one (or does not exist, or is a directory: the
    reader's own error then applies), else a temporary copy of the stream,
    read once, whose name ends as ``path``'s does (so that a format told by
    its suffix, ``.bin``, ``.npy``, ``.gz``, is still told). The copy is in
    the system's temporary folder and is removed on exit."""
    given = os.fspath(path)
    if not is_stream(given):
        yield path
        return
    folder = tempfile.mkdtemp(prefix="sobolev-index-input-")
    copy = os.path.join(folder, os.path.basename(given.rstrip("/")) or "input")
    try:
        try:
            with open(given, "rb") as source, open(copy, "xb") as target:
                shutil.copyfileobj(source, target, _CHUNK)
        except OSError as exc:
            # Name both places: a full temporary folder is not the index's disk.
            raise OSError(exc.errno, f"{given} is a pipe, read into a temporary copy in "
                                     f"{tempfile.gettempdir()} (set TMPDIR for another "
                                     f"folder), which failed: {exc.strerror}") from None
        try:
            yield copy
        except Exception as exc:
            raise _named_as_given(exc, copy, given)  # noqa: B904 (the same exception, renamed)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
