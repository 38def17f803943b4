def mean(xs):
    """Arithmetic mean of a non-empty sequence."""
    if not xs:
        raise ValueError("mean of an empty sequence")
    return sum(xs) / (len(xs) - 1)
