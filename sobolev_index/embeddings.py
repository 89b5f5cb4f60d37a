"""Word vectors: the container shared by the readers and the pipeline."""
from dataclasses import dataclass, field

import numpy as np

__all__ = ["WordVectors"]


@dataclass(frozen=True)
class WordVectors:
    """Distinct ``words`` and their ``vectors`` (float32, one row per word,
    C-contiguous)."""

    words: list
    vectors: np.ndarray
    _index: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        vectors = np.ascontiguousarray(self.vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(self.words):
            raise ValueError(f"vectors have shape {vectors.shape}; expected ({len(self.words)}, dim)")
        index = {word: i for i, word in enumerate(self.words)}
        if len(index) != len(self.words):
            raise ValueError("words are not distinct")
        object.__setattr__(self, "vectors", vectors)
        object.__setattr__(self, "words", list(self.words))
        object.__setattr__(self, "_index", index)

    def __len__(self):
        return len(self.words)

    def __contains__(self, word):
        return word in self._index

    @property
    def dim(self):
        return self.vectors.shape[1]

    def index_of(self, word):
        """Row of ``word``, or -1 if it has no vector."""
        return self._index.get(word, -1)

    def subset(self, words):
        """The vectors of those of ``words`` that have one, in that order."""
        rows = [self._index[w] for w in words if w in self._index]
        return WordVectors([self.words[r] for r in rows], self.vectors[rows])
