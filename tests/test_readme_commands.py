"""The README's "Know your data" lines run as written in an empty folder (the first ones write a
messy project), with the exit codes their comments state."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import torchloom

README = Path(__file__).resolve().parents[1] / "README.md"
GUIDE_SCRIPT = README.parent / "docs" / "examples" / "know_your_data.sh"
MARKER = "<!-- the tests run every line of the next block"
SRC = Path(torchloom.__file__).resolve().parents[1]


def command_lines(script: str) -> list[str]:
    """The command lines of a shell script (continuation backslashes joined), comments left out."""
    joined = script.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def readme_commands() -> list[str]:
    """The command lines of the marked block."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARKER) :], flags=re.S)
    assert block is not None, "the marked README block is missing"
    return command_lines(block.group(1))


def test_the_guide_shows_the_commands_run_here() -> None:
    """docs/guides/knowing-your-data.md includes this script: the test below runs its lines."""
    assert command_lines(GUIDE_SCRIPT.read_text(encoding="utf-8")) == readme_commands()


def _shell_with_this_torchloom(folder: Path) -> dict[str, str]:
    """An environment whose ``python`` and ``torchloom`` are this interpreter and this checkout."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name, command in (("python", ""), ("torchloom", " -m torchloom")):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)}{command} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(SRC)}


def test_readme_commands_run_with_the_exit_codes_they_state(tmp_path: Path) -> None:
    environment = _shell_with_this_torchloom(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    commands = readme_commands()
    assert len(commands) == 7 and commands[0].startswith("python -c")
    for line in commands:
        expected = re.search(r"#.*exit (\d)", line)
        done = subprocess.run(
            ["/bin/sh", "-c", line],
            cwd=work,
            env=environment,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == (int(expected.group(1)) if expected else 0), (line, done.stderr[-2000:])
    given = json.loads((work / "doctor-report" / "report.json").read_text(encoding="utf-8"))
    assert sum(pair["leak"] for pair in given["duplicates"]["pairs"]) == 2
    prepared = json.loads((work / "prepared.json").read_text(encoding="utf-8"))
    assert not any(pair["leak"] for pair in prepared["duplicates"]["pairs"])
    assert (work / "prepared" / "manifest.parquet").exists()
    assert (work / "grid.png").stat().st_size > 10_000 and (work / "batch.png").exists()
