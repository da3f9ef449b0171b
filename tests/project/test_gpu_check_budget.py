"""ci/gpu-check.sh fits five minutes: its section budgets, read from the script's own table, add up
to at most 300 s, and its header states that total (in seconds and minutes) as the script has it.
A later edit that raises a budget past the five minutes, or leaves the header behind, fails here."""

from __future__ import annotations

import re
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "gpu-check.sh"
#: The whole check on one GPU, its install and cold caches included: five minutes.
LIMIT_S = 300


def budgets(text: str) -> dict[str, int]:
    """The script's ``declare -A BUDGET=(...)`` table: seconds per section."""
    table = re.search(r"^declare -A BUDGET=\((.*)\)$", text, re.MULTILINE)
    assert table is not None, "gpu-check.sh has no 'declare -A BUDGET=(...)' line"
    found = {name: int(value) for name, value in re.findall(r"\[(\w+)\]=(\d+)", table.group(1))}
    assert found, "gpu-check.sh's BUDGET table is empty"
    return found


def header(text: str) -> str:
    """The script's comment header (its first lines up to the first command)."""
    lines = []
    for line in text.splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


def problems(text: str) -> list[str]:
    """What is wrong with the script ``text``'s budgets and the total its header states."""
    table = budgets(text)
    total = sum(table.values())
    found = []
    if total > LIMIT_S:
        found.append(f"the budgets {table} add up to {total} s, past {LIMIT_S} s")
    said = header(text)
    stated = re.search(r"in at most (\d+) s \((\d+(?:\.\d+)?) minutes\)", said)
    if stated is None:
        found.append("the header does not say 'in at most N s (M minutes)'")
    else:
        if int(stated.group(1)) != total:
            found.append(f"the header says {stated.group(1)} s, the budgets add up to {total} s")
        if abs(float(stated.group(2)) - total / 60) >= 0.01:
            found.append(f"the header says {stated.group(2)} minutes for {total} s")
    for pattern in (r"(\d+) in all", r"beyond the (\d+) s of one"):
        for number in re.findall(pattern, said):
            if int(number) != total:
                found.append(f"the header's '{pattern}' says {number}, the budgets add up to {total} s")
    return found


def test_the_budgets_add_up_to_at_most_five_minutes_as_the_header_says() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    assert set(budgets(text)) == {"install", "compile", "figures", "simt", "bandwidth", "lowprec", "report"}
    assert problems(text) == []


def test_a_budget_raised_past_five_minutes_fails() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    table = budgets(text)
    spare = LIMIT_S - sum(table.values())
    raised = re.sub(r"\[figures\]=(\d+)", lambda m: f"[figures]={int(m.group(1)) + spare + 1}", text, count=1)
    found = problems(raised)
    assert any("past 300 s" in line for line in found), found
    assert any("the header says" in line for line in found), found  # the header no longer tells the truth
