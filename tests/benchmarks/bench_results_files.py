"""Large results files: load + validate time, and the memory `hwbench compare` takes for two.

    .venv/bin/python tests/benchmarks/bench_results_files.py [--records 200000] [--keep DIR] [--parser json]

Writes two results files of ``--records`` matched records each (a base and a slightly
slower new run) in a temporary folder, then prints:

- the seconds of ``results.load`` (read, parse, migrate, schema and figure checks) of one
  file, split into parsing and checking, and of a whole ``hwbench validate`` command,
  best of ``--repeat``, with the parser hwbench uses (orjson where installed; ``--parser
  json``: the standard library's, as without orjson);
- the peak resident memory of a ``hwbench compare a.json b.json`` child (from
  ``resource.getrusage(RUSAGE_CHILDREN)`` in a small parent of its own) beside the memory
  of holding both parsed documents (a child that parses them and nothing else), both
  above the interpreter with hwbench's compare imported.

Targets: load + validate in at most 5 s; compare's peak at most 2x the memory of both
documents. Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the synthetic documents

from synthetic_results import device, document, record  # noqa: E402

from hwbench.results import checked  # noqa: E402
from hwbench.results import files as results  # noqa: E402

LOAD_TARGET_S = 5.0
MEMORY_TARGET = 2.0

#: A child that prints its resident memory (KiB) after imports, then after parsing the files it is given.
HOLD = """
import json, sys
import hwbench.cli.compare

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

print(rss())
docs = [json.loads(open(p, "rb").read()) for p in sys.argv[1:]]
print(rss())
"""


def records(n: int, slower: float, seed: int) -> list[dict[str, Any]]:
    """``n`` distinct gemm cases with three samples each, ``slower`` times the base medians."""
    out = []
    for i in range(n):
        median = (1.0 + (i % 97) / 97) * 1e-4 * slower
        samples = [median * (1 + ((i + seed + k) % 5 - 2) * 0.01) for k in range(3)]
        out.append(
            record(
                "gemm",
                ("llvm", "numpy", "opencl")[i % 3],
                "fp32",
                {"M": 64 + i // 3, "N": 64, "K": 64},
                median,
                samples=samples,
                impl_kind="native" if i % 3 == 1 else "portable",
                tflops=2 * 64**3 / median / 1e12,
                pct_peak=12.5,
                gbps=3.0,
            )
        )
    return out


def write_pair(folder: Path, n: int) -> tuple[Path, Path]:
    """The base and new files of ``n`` records each."""
    template = document([record("gemm", "numpy", "fp32", {"M": 8, "N": 8, "K": 8})], [device("cpu", "Test CPU", "cpu")])
    paths = []
    for name, slower, seed in (("a.json", 1.0, 0), ("b.json", 1.02, 1)):
        doc = {**template, "records": records(n, slower, seed)}
        paths.append(results.save(doc, folder / name))
    return paths[0], paths[1]


def time_load(path: Path, repeat: int) -> dict[str, float]:
    """Best seconds of a full checked load, and of its parts: read and parse, then check."""
    best: dict[str, float] = {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        doc = results.read(path)
        t1 = time.perf_counter()
        problems = results.validate(doc)
        t2 = time.perf_counter()
        assert not problems, problems[:3]
        del doc
        t3 = time.perf_counter()
        checked.load_checked(path)
        t4 = time.perf_counter()
        for key, value in (("parse", t1 - t0), ("validate", t2 - t1), ("load_checked", t4 - t3)):
            best[key] = min(best.get(key, value), value)
    return best


#: ``python -c`` text that runs hwbench's command line with the standard library's JSON parser only.
JSON_ONLY = (
    "import sys; from hwbench.results import files; files._orjson = None; "
    "from hwbench.cli.main import main; sys.exit(main())"
)


def hwbench_command(json_only: bool) -> list[str]:
    """The command line that starts hwbench: ``python -m hwbench``, or with json as its only parser."""
    return [sys.executable, "-c", JSON_ONLY] if json_only else [sys.executable, "-m", "hwbench"]


def parser_name() -> str:
    """The JSON parser :func:`hwbench.results.files.parse` tries first here."""
    parser = results._orjson
    return "json (standard library)" if parser is None else f"orjson {parser.__version__} (json where it would differ)"


#: A small process that runs ``hwbench compare A B`` as its only child and prints that child's
#: peak resident KiB: a child forked from this (large) process would count its pages until exec.
MEASURE = """
import json, resource, subprocess, sys
command, files = json.loads(sys.argv[1]), sys.argv[2:]
done = subprocess.run([*command, "compare", *files], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
if done.returncode != 0:
    sys.exit(f"hwbench compare failed ({done.returncode}): {done.stderr.strip()}")
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def compare_peak_kib(a: Path, b: Path, json_only: bool) -> tuple[int, float]:
    """Peak resident KiB of ``hwbench compare a b`` (RUSAGE_CHILDREN of a small parent), and its seconds."""
    t0 = time.perf_counter()
    command = json.dumps(hwbench_command(json_only))
    done = subprocess.run([sys.executable, "-c", MEASURE, command, str(a), str(b)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr.strip())
    return int(done.stdout), time.perf_counter() - t0


def command_seconds(json_only: bool, *args: str) -> float:
    """Wall seconds of ``hwbench ARGS`` in a child, interpreter start and exit included."""
    t0 = time.perf_counter()
    done = subprocess.run([*hwbench_command(json_only), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"hwbench {args[0]} failed ({done.returncode}): {done.stderr.strip()}")
    return time.perf_counter() - t0


def held_kib(*paths: Path) -> tuple[int, int]:
    """Resident KiB of a child after importing hwbench's compare, and after parsing ``paths``."""
    done = subprocess.run([sys.executable, "-c", HOLD, *map(str, paths)], capture_output=True, text=True, check=True)
    base, held = (int(line) for line in done.stdout.split())
    return base, held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2, help="load timings taken (the best is shown)")
    parser.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="write the files into this folder and keep them (a.json and b.json already there are used as they are)",
    )
    parser.add_argument(
        "--parser", choices=("auto", "json"), default="auto", help="json: the standard library's parser only"
    )
    args = parser.parse_args()
    json_only = args.parser == "json"
    if json_only:
        results._orjson = None
    with tempfile.TemporaryDirectory(prefix="bench-results-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        a, b = folder / "a.json", folder / "b.json"
        if args.keep and a.is_file() and b.is_file():
            print(f"{a} and {b} from an earlier run, {a.stat().st_size / 1e6:.0f} MB each")
        else:
            a, b = write_pair(folder, args.records)
            size = a.stat().st_size / 1e6
            print(f"{args.records} records per file, {size:.0f} MB each (written in {time.perf_counter() - t0:.1f} s)")
        peak, seconds = compare_peak_kib(a, b, json_only)
        validate_s = min(command_seconds(json_only, "validate", str(a)) for _ in range(args.repeat))
        base, held = held_kib(a, b)
        load = time_load(a, args.repeat)
    total = load["load_checked"]
    docs, over = (held - base) / 1024, (peak - base) / 1024
    ratio = over / docs
    print(f"parser: {parser_name()}")
    print(f"load_checked {total:.2f} s (read and parse {load['parse']:.2f} s, checks {load['validate']:.2f} s)")
    print(f"hwbench validate: {validate_s:.2f} s, the whole command")
    print(f"both documents held: {docs:.0f} MiB above the interpreter ({base / 1024:.0f} MiB)")
    print(
        f"hwbench compare: peak {peak / 1024:.0f} MiB, {over:.0f} MiB above the interpreter "
        f"= {ratio:.2f}x the documents ({seconds:.1f} s)"
    )
    missed = []
    if total > LOAD_TARGET_S:
        missed.append(f"load {total:.2f} s > {LOAD_TARGET_S:g} s")
    if ratio > MEMORY_TARGET:
        missed.append(f"compare memory {ratio:.2f}x > {MEMORY_TARGET:g}x")
    print(
        "targets: "
        + ("; ".join(missed) if missed else f"met (load <= {LOAD_TARGET_S:g} s, compare <= {MEMORY_TARGET:g}x)")
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
