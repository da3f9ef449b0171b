"""Errors a user can act on: the CLI prints their message as one line and exits non-zero."""


class UserError(Exception):
    """Bad input or a refused action; the message says what was wrong and what to do."""

    exit_code = 2


class NotApplicable(Exception):
    """An implementation cannot take this case (a library's shape limits, say); the message says
    why, and the case is skipped with it rather than failed."""
