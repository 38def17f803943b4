"""The quiz agent: its model provider (``quizbot/<name>``) lives here."""
