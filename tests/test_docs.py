"""The documentation stays true: README.md, docs/*.md and runs/README.md are checked as code.

- every ```python block runs: the blocks of one file in order, in one namespace of their own, in a fresh
  temporary directory (code meant only to be shown uses another fence: ```py, ```text);
- every ``attnpde ...`` command line of a ```console or ```sh block parses with the command's own
  argument parser (nothing is run), and the configurations of ``runs/`` it names exist;
- every ```toml block is a valid configuration (of `attnpde branch` with a [branch] table, else of `attnpde run`);
- every relative link, and every repository path written in backticks, points to a file that exists.

The files whose examples take more than a few seconds (listed in SLOW) run in the slow lane.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "runs" / "README.md"]
#: the files whose ```python blocks take more than a few seconds (they run in the slow lane)
SLOW = {"README.md", "archive.md", "numerics.md", "terminal.md"}
#: a fenced block: its info string's first word and its text (fences at the start of a line only)
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def blocks(path: Path, *kinds: str, kind: bool = False) -> list[tuple]:
    """(line of the fence, text) of the fenced blocks of ``path`` whose info string is one of ``kinds``
    (with ``kind``: (line, info string, text))."""
    text = path.read_text()
    found = [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2)) for m in FENCE.finditer(text)]
    return [b if kind else (b[0], b[2]) for b in found if b[1] in kinds]


def test_the_documentation_is_there():
    names = {p.name for p in DOCS}
    assert {"README.md", "model.md", "numerics.md", "configuration.md", "archive.md", "cluster.md",
            "performance.md", "studies.md", "architecture.md"} <= names
    assert sum(len(blocks(p, "python")) for p in DOCS) >= 5            # the checks below see the examples
    assert sum(len(blocks(p, "console", "sh")) for p in DOCS) >= 5


# --- ```python blocks --------------------------------------------------------------------------------
def _python_params():
    out = []
    for path in DOCS:
        if blocks(path, "python"):
            marks = [pytest.mark.slow] if path.name in SLOW else []
            out.append(pytest.param(path, marks=marks, id=_name(path)))
    return out


@pytest.mark.parametrize("path", _python_params())
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for line, code in blocks(path, "python"):
        exec(compile(code, f"{_name(path)}:{line}", "exec"), namespace)


# --- command lines -------------------------------------------------------------------------------------
_PROMPT = re.compile(r"^[\w.@-]*\$\s+")


def command_lines(path: Path) -> list[tuple[str, list[str]]]:
    """(where, arguments after ``attnpde``) of every attnpde command of the console and sh blocks: in a
    console block the lines after a prompt (``$ ``, ``alpha$ ``), in an sh block every line."""
    out = []
    for line, info, text in blocks(path, "console", "sh", kind=True):
        for i, raw in enumerate(text.splitlines()):
            prompt = _PROMPT.match(raw)
            if info == "console" and prompt is None:
                continue                                  # the output of a console block
            command = raw[prompt.end():] if prompt else raw
            words = shlex.split(command, comments=True)
            while words and re.match(r"^\w+=", words[0]):          # VAR=value before the command
                words.pop(0)
            if words and Path(words[0]).name == "attnpde":
                out.append((f"{_name(path)}:{line + 1 + i}", words[1:]))
    return out


def _commands():
    return [pytest.param(args, id=where) for path in DOCS for where, args in command_lines(path)]


def test_the_docs_show_commands():
    names = {args[0] for path in DOCS for _, args in command_lines(path) if args}
    assert {"run", "info", "plot", "sweep", "validate"} <= names


@pytest.mark.parametrize("args", _commands())
def test_command_lines_parse(args, capsys):
    from solvers.app import cli

    try:
        # as main() reads argv: comma lists attached to their option (a renamed helper fails here, loudly)
        parsed = cli.build_parser().parse_args(cli._attach_list_values(list(args)))
    except SystemExit as e:                     # --version and --help exit 0; a parse error exits 2
        assert e.code == 0, (args, capsys.readouterr().err)
        return
    config = getattr(parsed, "config", None)
    if config is not None and config.startswith("runs/"):
        assert (ROOT / config).is_file(), f"{config} is not a configuration of runs/"


# --- ```toml blocks ------------------------------------------------------------------------------------
def _toml_params():
    return [pytest.param(text, id=f"{_name(p)}:{line}") for p in DOCS for line, text in blocks(p, "toml")]


@pytest.mark.parametrize("text", _toml_params())
def test_toml_blocks_are_valid_configurations(text):
    """A block with a [branch] table is an `attnpde branch` configuration, any other an `attnpde run` one."""
    from solvers.app.branch import parse_branch_config
    from solvers.app.config import parse_config, parse_toml

    (parse_branch_config if "branch" in parse_toml(text) else parse_config)(text)


# --- links and paths -----------------------------------------------------------------------------------
_LINK = re.compile(r"\]\(([^)\s#]*(?:/|\.md|\.py|\.toml)[^)\s#]*)(?:#[^)]*)?\)")
_PATH = re.compile(r"`((?:scripts|solvers|spectral|tests|runs|docs|\.ci)/[^`\s]+)`")


@pytest.mark.parametrize("path", [pytest.param(p, id=_name(p)) for p in DOCS])
def test_links_and_paths_exist(path):
    text = path.read_text()
    missing = [t for t in _LINK.findall(text) if "://" not in t and not (path.parent / t).exists()]
    for p in _PATH.findall(text):
        p = p.rstrip(".,;:").split("::")[0]             # a test's node id names its file
        # globs, outputs of a run (archives, figures, directories) and placeholders are not files
        if any(c in p for c in "*<>") or p.endswith((".h5", ".png", "/", ".json")) or "_plots" in p:
            continue
        if not (ROOT / p).exists():
            missing.append(p)
    assert not missing, f"{_name(path)}: {missing}"
