"""Statistics shared by the benchmarks."""

from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson_bounds(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n > 0`` trials.

    ``p = k/n``; centre ``(p + z²/2n) / (1 + z²/n)``; half-width
    ``z / (1 + z²/n) * sqrt(p(1-p)/n + z²/4n²)``. Callers decide what ``n == 0`` means.
    """
    if n <= 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # clamp float noise so k == 0 gives exactly 0 and k == n exactly 1
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high
