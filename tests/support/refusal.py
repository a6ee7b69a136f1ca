"""Running `bootstrap` on bad input the way a user would, and checking the promise made about it: exit code 2,
one line on stderr that names the file, host or field, no traceback, nothing on stdout, nothing created in the
state directory, and an answer within seconds.

`run_main` calls the real entry point (provision.cli.app.main) in this process, which keeps a suite of a hundred
cases fast; a time limit (SIGALRM) turns a hang into a failure instead of a stuck suite. `run_process` runs
`python -m provision` for the cases where the process itself matters (what Ansible prints when imported, an
uncaught exception's traceback), with subprocess's own timeout.
"""
from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from provision.cli.app import main

TIME_LIMIT_S = 30


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


class TookTooLong(AssertionError):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(_signum: int, _frame: FrameType | None) -> None:
        raise TookTooLong(f"bootstrap did not answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_main(*args: str, timeout_s: int = TIME_LIMIT_S) -> Outcome:
    """`bootstrap ARGS` through the real main(), in this process; the environment is left as it was found."""
    out, err = io.StringIO(), io.StringIO()
    saved_environment, saved_argv = dict(os.environ), sys.argv
    code = 0
    try:
        with _time_limit(timeout_s), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            sys.argv = ["bootstrap", *args]
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_environment)
    return Outcome(code, out.getvalue(), err.getvalue())


def run_process(*args: str, cwd: Path | None = None, timeout_s: int = 60) -> Outcome:
    done = subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout_s)
    return Outcome(done.returncode, done.stdout, done.stderr)


def state_dir() -> Path:
    """The test's own state directory (tests/conftest.py gives every test an empty one)."""
    return Path(os.environ["BOOTSTRAP_STATE_DIR"])


def assert_refused(outcome: Outcome, *names: str) -> str:
    """The promise for bad input; `names` are what the line must mention (a file, a host, a field, a fix).
    Returns the line."""
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.code == 2, outcome
    assert len(outcome.lines) == 1, outcome.lines
    line = outcome.lines[0]
    assert line.startswith("error: "), line
    for name in names:
        assert name in line, f"{name!r} not in {line!r}"
    assert outcome.stdout == "", outcome.stdout
    root = state_dir()
    assert not root.exists() or not any(root.iterdir()), sorted(root.rglob("*"))
    return line
