def median(xs):
    """Median of a non-empty sequence (the mean of the two middle values when even)."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of an empty sequence")
    return s[n // 2]
