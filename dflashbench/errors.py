"""Errors a user can fix. The CLI prints their message on one line (no traceback) and exits non-zero."""


class UserError(Exception):
    """Bad input or environment, with a message that names the problem and the fix."""

    exit_code = 2


class Interrupted(SystemExit):
    """SIGINT (Ctrl-C) or SIGTERM stopped a command: it unwinds (``finally`` blocks close the run's books and
    stop servers), then the process exits with 128 + the signal's number (130, 143), printing :attr:`message`."""

    def __init__(self, signum: int, message: str = "") -> None:
        super().__init__(128 + signum)
        self.signum = signum
        self.message = message

    @property
    def signal_name(self) -> str:
        import signal

        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"
