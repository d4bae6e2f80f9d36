"""The version matrix (`make test-matrix`): the whole suite under each supported Python and
Django, one virtualenv per combination.

    python scripts/test_matrix.py [--workers N] [py3.11-dj5.2 py3.12-dj6.0 ...] [-- pytest args]

For each combination it finds the interpreter (pyenv's newest X.Y, else `pythonX.Y` on PATH),
makes `$MATRIX_DIR/<combination>` (default var/matrix) with requirements-dev.txt (the runtime of
requirements.txt, the tests and tools) and that Django
(the django-tasks backport stays installed on Django 6 too: the suite checks it is never
imported there), and runs the suite in it with the caller's environment (ATF_TEST_DATABASE_NAME,
REDIS_URL, ...) as `make test` does: scripts/run_suite.py, its parallel phase on N processes
(--workers; run_suite.py's default when not given), then the tests marked serial. On Django 6
Django's own deprecation warnings are errors. It prints one line per combination, then one
line naming those it could not run; the exit status is non-zero when a run failed, or when a
combination could not run under CI (CI=true).

Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Every supported combination: Django 5.2 LTS on the oldest Python, 6.0 and 6.1 on newer ones.
COMBINATIONS = ("py3.11-dj5.2", "py3.12-dj6.0", "py3.13-dj6.1")
#: Django's own deprecations, as errors (the warnings of the version after the installed one).
DJANGO_6_WARNINGS = ("error::django.utils.deprecation.RemovedInNextVersionWarning",)


@dataclass(frozen=True)
class Combination:
    python: str  #: "3.12"
    django: str  #: "6.0"

    @classmethod
    def parse(cls, text: str) -> Combination:
        match = re.fullmatch(r"py(\d\.\d+)-dj(\d+\.\d+)", text)
        if match is None:
            raise SystemExit(f"test-matrix: {text!r} is not a combination like py3.12-dj6.0")
        return cls(*match.groups())

    @property
    def name(self) -> str:
        return f"py{self.python}-dj{self.django}"

    @property
    def django_spec(self) -> str:
        major, minor = (int(part) for part in self.django.split("."))
        return f"Django>={self.django},<{major}.{minor + 1}"


def find_python(version: str) -> str | None:
    """The newest pyenv interpreter X.Y.*, else `pythonX.Y` on PATH; None when neither is."""
    if pyenv := shutil.which("pyenv"):
        listed = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True)
        found = [line.strip() for line in listed.stdout.splitlines()
                 if re.fullmatch(rf"{re.escape(version)}\.\d+", line.strip())]
        if found:
            newest = max(found, key=lambda v: tuple(int(part) for part in v.split(".")))
            prefix = subprocess.run([pyenv, "prefix", newest], capture_output=True, text=True)
            python = Path(prefix.stdout.strip(), "bin", "python")
            if prefix.returncode == 0 and python.exists():
                return str(python)
    return shutil.which(f"python{version}")


def requirements(combination: Combination) -> str:
    """requirements-dev.txt, the requirements.txt it includes in place of its `-r` line, with
    the combination's Django in place of the pinned one."""
    lines = [*(ROOT / "requirements.txt").read_text().splitlines(),
             *(ROOT / "requirements-dev.txt").read_text().splitlines()]
    kept = [line for line in lines
            if not re.match(r"(?i)django==", line) and not line.startswith("-r ")]
    return "\n".join([*kept, combination.django_spec, ""])


def ensure_venv(combination: Combination, python: str, directory: Path) -> Path:
    """The combination's virtualenv, (re)installed when its requirements changed."""
    venv = directory / combination.name
    wanted = requirements(combination)
    stamp = venv / ".requirements.sha256"
    digest = hashlib.sha256(wanted.encode()).hexdigest()
    if (venv / "bin" / "python").exists() and stamp.exists() and stamp.read_text() == digest:
        return venv
    print(f"==> {combination.name}: installing requirements into {venv}", flush=True)
    subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
    listed = venv / "requirements.txt"
    listed.write_text(wanted)
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input",
         "--disable-pip-version-check", "-r", str(listed)], capture_output=True, text=True)
    if installed.returncode != 0:
        noise = "is neither a file nor a directory"
        print("\n".join(line for line in installed.stderr.splitlines() if noise not in line))
        raise RuntimeError(f"pip could not install {combination.name}'s requirements")
    stamp.write_text(digest)
    return venv


def run_suite(combination: Combination, venv: Path, workers: list[str],
              pytest_args: list[str]) -> bool:
    warnings = DJANGO_6_WARNINGS if int(combination.django.split(".")[0]) >= 6 else ()
    command = [sys.executable, str(ROOT / "scripts" / "run_suite.py"),
               "--python", str(venv / "bin" / "python"), *workers, "--",
               *(arg for warning in warnings for arg in ("-W", warning)), *pytest_args]
    print(f"==> {combination.name}: {' '.join(command[1:])}", flush=True)
    return subprocess.run(command, cwd=ROOT).returncode == 0


def main(argv: list[str]) -> int:
    names, pytest_args = argv, []
    if "--" in argv:
        names, pytest_args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    workers: list[str] = []
    if "--workers" in names:
        at = names.index("--workers")
        workers, names = names[at:at + 2], names[:at] + names[at + 2:]
    combinations = [Combination.parse(name) for name in names or COMBINATIONS]
    directory = Path(os.environ.get("MATRIX_DIR", ROOT / "var" / "matrix"))
    outcomes: list[str] = []
    missing: list[str] = []
    failed = False
    for combination in combinations:
        python = find_python(combination.python)
        if python is None:
            missing.append(f"{combination.name} (no Python {combination.python}: neither pyenv "
                           f"nor python{combination.python} on PATH)")
            continue
        started = time.monotonic()
        try:
            passed = run_suite(combination, ensure_venv(combination, python, directory),
                               workers, pytest_args)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            missing.append(f"{combination.name} ({exc})")
            continue
        failed |= not passed
        outcomes.append(f"{combination.name}: {'passed' if passed else 'FAILED'} "
                        f"in {time.monotonic() - started:.0f}s")
    for line in outcomes:
        print(f"==> test-matrix {line}")
    print("==> test-matrix could not run: " + ("; ".join(missing) if missing else "none"))
    return 1 if failed or (missing and os.environ.get("CI") == "true") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
