"""The README's `torchloom` command lines run as written, on a messy project, with the exit codes
their comments state."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from torchloom.tools.demo.data import write_demo_data

README = Path(__file__).resolve().parents[1] / "README.md"
GUIDE_SCRIPT = README.parent / "docs" / "examples" / "know_your_data.sh"
MARKER = "<!-- the tests run every `torchloom` line of the next block"


def command_lines(script: str) -> list[str]:
    """The ``torchloom`` command lines of a shell script (continuation backslashes joined)."""
    joined = script.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("torchloom ")]


def readme_commands() -> list[str]:
    """The command lines of the marked block."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARKER) :], flags=re.S)
    assert block is not None, "the marked README block is missing"
    return command_lines(block.group(1))


def test_the_guide_shows_the_commands_run_here() -> None:
    """docs/guides/knowing-your-data.md includes this script: the test below runs its lines."""
    assert command_lines(GUIDE_SCRIPT.read_text(encoding="utf-8")) == readme_commands()


def test_readme_commands_run_with_the_exit_codes_they_state(tmp_path: Path) -> None:
    write_demo_data(tmp_path / "project", counts=(30, 14), image_size=64, progress=False)
    shutil.copytree(tmp_path / "project" / "given", tmp_path / "data")
    shutil.copytree(tmp_path / "project" / "given", tmp_path / "raw")
    commands = readme_commands()
    assert len(commands) == 5
    for line in commands:
        command, _, comment = line.partition("#")
        expected = re.search(r"exit (\d)", comment)
        words = shlex.split(command)
        stdout = None
        if ">" in words:  # a redirection, as a shell would do it
            stdout = open(tmp_path / words[words.index(">") + 1], "w", encoding="utf-8")  # noqa: SIM115
            words = words[: words.index(">")]
        try:
            done = subprocess.run(
                [sys.executable, "-m", "torchloom", *words[1:]],
                cwd=tmp_path,
                stdout=stdout or subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                timeout=180,
                check=False,
            )
        finally:
            if stdout is not None:
                stdout.close()
        assert done.returncode == (int(expected.group(1)) if expected else 0), (line, done.stderr[-2000:])
    given = json.loads((tmp_path / "doctor-report" / "report.json").read_text(encoding="utf-8"))
    assert sum(pair["leak"] for pair in given["duplicates"]["pairs"]) == 2
    prepared = json.loads((tmp_path / "prepared.json").read_text(encoding="utf-8"))
    assert not any(pair["leak"] for pair in prepared["duplicates"]["pairs"])
    assert (tmp_path / "prepared" / "manifest.parquet").exists()
    assert (tmp_path / "grid.png").stat().st_size > 10_000 and (tmp_path / "batch.png").exists()
