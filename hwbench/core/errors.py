"""Errors a user can act on: the CLI prints their message as one line and exits non-zero."""


class UserError(Exception):
    """Bad input or a refused action; the message says what was wrong and what to do."""

    exit_code = 2
