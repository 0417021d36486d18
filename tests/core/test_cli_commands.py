"""How ``spectool`` finds its subcommands: the built-in table, plus ``spectool.commands`` entry
points of any installed distribution, each module imported only when its command runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    paths = [str(ROOT), str(ROOT / "serving")] + ([str(extra_path)] if extra_path else [])
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": ":".join(paths), "PATH": "/usr/bin:/bin"},
    )


def test_an_entry_point_adds_a_command(tmp_path):
    """A distribution installed beside spectool (a dist-info folder on sys.path, as pip writes
    it) registers `hello` without any change to spectool."""
    (tmp_path / "hello_cmd.py").write_text(
        textwrap.dedent('''
        """say hello from a plug-in command"""
        def add_arguments(p):
            p.add_argument("--name", default="world")
        def run(args):
            print("hello", args.name)
            return 0
    ''')
    )
    info = tmp_path / "hello_cmd-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hello-cmd\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[spectool.commands]\nhello = hello_cmd\n")
    out = _run(
        "import sys; from spectool.cli import main; sys.exit(main(['hello', '--name', 'x']))", tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello x"
    listing = _run("from spectool.cli import main; main(['--help'])", tmp_path)
    assert "hello" in listing.stdout and "say hello from a plug-in command" in listing.stdout


def test_help_and_one_command_import_nothing_else():
    """`spectool serve --help` loads the serve command only: no torch, no FastAPI, no bench."""
    code = (
        "import sys, json\nfrom spectool.cli import main\n"
        "try:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'fastapi', 'transformers') or m.startswith('spectool.bench'))))"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert "--decoding" in out.stdout  # the serve command's own options were registered
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_command_whose_extra_is_missing_says_how_to_install(tmp_path):
    info = tmp_path / "ghost-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[spectool.commands]\nghost = ghost_pkg.cli\n")
    out = _run("import sys; from spectool.cli import main; sys.exit(main(['ghost']))", tmp_path)
    assert out.returncode == 1
    assert "pip install" in out.stderr and "ghost_pkg" in out.stderr
