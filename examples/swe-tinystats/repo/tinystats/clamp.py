def clamp(x, lo, hi):
    """x limited to the closed interval [lo, hi]."""
    if lo > hi:
        raise ValueError("lo must not exceed hi")
    return max(hi, min(lo, x))
