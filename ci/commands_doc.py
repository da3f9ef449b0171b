"""Write the option reference of ``docs/commands.md`` from the commands' own parsers.

    .venv/bin/python ci/commands_doc.py          # rewrite the reference in docs/commands.md
    .venv/bin/python ci/commands_doc.py --check  # exit 1 where it is out of date

The reference is the part of the page between the two marker lines below; the prose above it is
written by hand. ``tests/project/test_docs.py`` checks that every option of every command appears there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hwbench.cli.main import COMMANDS, _parser  # noqa: E402

PAGE = ROOT / "docs" / "commands.md"
BEGIN = "<!-- options: written by ci/commands_doc.py; edit the commands' help, then run it -->"
END = "<!-- end of options -->"


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser`` by name (none where it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option(action: argparse.Action) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
    if action.option_strings and action.nargs != 0:
        metavar = action.metavar or (
            "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
        )
        names += f" `{metavar if isinstance(metavar, str) else ' '.join(metavar)}`"
    return names


def _table(parser: argparse.ArgumentParser) -> Iterator[str]:
    rows = [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    if not rows:
        return
    yield "| option | meaning |"
    yield "| --- | --- |"
    for action in rows:
        help_text = "" if action.help == argparse.SUPPRESS else (action.help or "")
        if "%(default)" in help_text:
            help_text = help_text % {"default": action.default}
        yield f"| {_option(action)} | {_cell(help_text)} |"


def reference() -> str:
    """The reference: one section per command (and per ``probe`` subcommand), a table of its options."""
    lines = [BEGIN, ""]
    commands = subparsers(_parser())
    for name in COMMANDS:
        parser = commands[name]
        lines += [f"### `hwbench {name}`", ""]
        lines += list(_table(parser)) + [""]
        for sub, subparser in subparsers(parser).items():
            lines += [f"#### `hwbench {name} {sub}`", ""]
            lines += list(_table(subparser)) + [""]
    return "\n".join(lines + [END]) + "\n"


def rewritten(text: str) -> str:
    """``text`` with its reference replaced (appended where the markers are missing)."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        return head + reference().rstrip("\n") + tail
    return text.rstrip("\n") + "\n\n## Options of every command\n\n" + reference()


def main() -> int:
    parser = argparse.ArgumentParser(description="Write docs/commands.md's option reference.")
    parser.add_argument("--check", action="store_true", help="exit 1 where the page is out of date")
    args = parser.parse_args()
    text = PAGE.read_text()
    new = rewritten(text)
    if args.check:
        if new != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run .venv/bin/python ci/commands_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
