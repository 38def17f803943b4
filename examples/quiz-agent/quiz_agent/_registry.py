"""Entry point for Inspect (``[project.entry-points.inspect_ai]``): importing registers ``quizbot``."""

from inspect_ai.model import ModelAPI, modelapi


@modelapi(name="quizbot")
def quizbot() -> type[ModelAPI]:
    from .provider import QuizBotAPI

    return QuizBotAPI
