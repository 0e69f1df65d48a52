"""Errors a user can fix. The CLI prints their message on one line (no traceback) and exits non-zero."""


class UserError(Exception):
    """Bad input or environment, with a message that names the problem and the fix."""

    exit_code = 2
