"""How ``spectool`` finds its subcommands: the built-in table, plus ``spectool.commands`` entry
points of any installed distribution, each module imported only when its command runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, *extra_paths: Path) -> subprocess.CompletedProcess:
    paths = [str(ROOT), str(ROOT / "serving"), *map(str, extra_paths)]
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
        "('torch', 'fastapi', 'transformers') or m.startswith('spectool_bench'))))"
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


def test_a_measurement_command_without_spectool_bench_says_what_to_install(monkeypatch, capsys):
    """The measurement commands live in another distribution; with none of its entry points
    installed they are still listed, and running one names the distribution to install."""
    from spectool import cli

    monkeypatch.setattr(cli.metadata, "entry_points", lambda **_: [])
    assert cli.main(["bench", "--quick", "--out", "x"]) == 1
    err = capsys.readouterr().err
    assert "spectool bench: error:" in err and "pip install spectool-bench" in err
    try:
        cli.main(["--help"])
    except SystemExit:
        pass
    listing = capsys.readouterr().out
    assert all(name in listing for name in cli.ELSEWHERE) and "not installed" in listing
    # a core command is unaffected
    assert cli.main(["model", "client", "--G", "1", "--g", "0.5", "--T", "1", "--alpha", "1"]) == 0


def test_spectool_bench_registers_every_measurement_command(tmp_path):
    """bench/pyproject.toml's entry points, installed as pip writes them, give each command
    the core no longer ships (cli.ELSEWHERE), and each one's options parse (`--help`)."""
    import tomllib

    from spectool.cli import COMMANDS, ELSEWHERE

    declared = tomllib.loads((ROOT / "bench" / "pyproject.toml").read_text())["project"]["entry-points"][
        "spectool.commands"
    ]
    assert set(declared) == set(ELSEWHERE) and not set(declared) & set(COMMANDS)
    info = tmp_path / "spectool_bench_probe-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spectool-bench-probe\nVersion: 1.0\n")
    lines = "".join(f"{name} = {module}\n" for name, module in declared.items())
    (info / "entry_points.txt").write_text("[spectool.commands]\n" + lines)
    code = textwrap.dedent(f"""
        import contextlib, io, json
        from spectool.cli import main
        out = {{}}
        for name in {sorted(declared)!r}:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                try:
                    main([name, "--help"])
                except SystemExit as exc:
                    out[name] = (exc.code, buf.getvalue().splitlines()[0] if buf.getvalue() else "")
        print(json.dumps(out))
    """)
    result = _run(code, tmp_path, ROOT / "bench")
    assert result.returncode == 0, result.stderr
    usage = json.loads(result.stdout.strip().splitlines()[-1])
    assert usage == {name: [0, usage[name][1]] for name in declared}
    assert all(line.startswith(f"usage: spectool {name}") for name, (_, line) in usage.items())
