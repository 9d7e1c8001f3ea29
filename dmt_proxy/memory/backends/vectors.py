"""A growable in-RAM matrix of unit vectors keyed by id (brute-force cosine search)."""

from __future__ import annotations

import numpy as np


class VectorMatrix:
    """Unit vectors of one namespace, growable, with O(1) removal (swap with last)."""

    def __init__(self, dims: int) -> None:
        self.keys: list[str] = []
        self.pos: dict[str, int] = {}
        self.mat = np.zeros((16, dims), dtype=np.float32)

    def set(self, key: str, vector: np.ndarray) -> None:
        row = self.pos.get(key)
        if row is None:
            row = len(self.keys)
            if row == self.mat.shape[0]:
                self.mat = np.concatenate([self.mat, np.zeros_like(self.mat)])
            self.keys.append(key)
            self.pos[key] = row
        self.mat[row] = vector

    def remove(self, key: str) -> None:
        row = self.pos.pop(key, None)
        if row is None:
            return
        last = len(self.keys) - 1
        if row != last:
            moved = self.keys[last]
            self.keys[row] = moved
            self.pos[moved] = row
            self.mat[row] = self.mat[last]
        self.keys.pop()

    def scores(self, query: np.ndarray) -> np.ndarray:
        return np.asarray(self.mat[: len(self.keys)] @ query)

    def __len__(self) -> int:
        return len(self.keys)
