"""Normalise free-text quiz answers before comparing them."""

import re
import unicodedata

__all__ = ["normalise", "same_answer"]


def normalise(text: str) -> str:
    """Casefolded, accents and punctuation removed, one space between words."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    words = re.findall(r"[a-z0-9]+", plain.casefold())
    return " ".join(words)


def same_answer(given: str, expected: str) -> bool:
    return normalise(given) == normalise(expected)
