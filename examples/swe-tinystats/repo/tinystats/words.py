def unique_words(text):
    """The distinct words of text, in order of first appearance."""
    return text.split()
