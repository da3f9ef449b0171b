"""The summary section: runs, host, devices, software stack, settings, and what did not run and why."""

from __future__ import annotations

import json
from typing import Any

from hwbench.decide.catalog import Catalog
from hwbench.report.data import Run, devices, mem_gbps, not_ok, num, sub
from hwbench.report.html import Raw, escape, no_data, note, table


def _scalar(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "))
    return str(value)


def _runs(runs: list[Run]) -> str:
    rows = []
    for run in runs:
        r, hw = sub(run.doc, "run"), sub(sub(run.doc, "run"), "hwbench")
        records = run.doc.get("records") or []
        counts: dict[str, int] = {}
        for rec in records:
            counts[str(rec.get("status"))] = counts.get(str(rec.get("status")), 0) + 1
        status = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no records"
        rows.append(
            [
                run.path.name,
                r.get("id", "–"),
                f"{r.get('started', '?')} → {r.get('finished') or '?'}",
                r.get("profile") or "–",
                " ".join(r.get("command") or []),
                f"{hw.get('version', '?')} ({(hw.get('git_commit') or '?')[:10]})",
                ("INCOMPLETE (interrupted) · " if r.get("incomplete") else "") + status,
            ]
        )
    return table(["file", "run", "time (UTC)", "profile", "command", "hwbench", "records"], rows)


def _host(run: Run) -> str:
    host, cpu = sub(run.doc, "host"), sub(sub(run.doc, "host"), "cpu")
    memory = num(host.get("memory_bytes"))
    rows = [
        ["host", host.get("hostname", "?")],
        ["os", host.get("os", "?")],
        [
            "cpu",
            f"{cpu.get('model', '?')}, {cpu.get('cores', '?')} cores"
            f" ({cpu.get('logical_cpus', '?')} logical), {cpu.get('machine', '')}",
        ],
        ["vector features", ", ".join(cpu.get("features") or []) or "–"],
        ["memory", f"{memory / 2**30:.1f} GiB" if memory else "–"],
    ]
    return table(["host", "value"], rows, css="kv")


def _software(run: Run) -> str:
    software = sub(run.doc, "software")
    rows = []
    for key, value in software.items():
        if key == "blas" and isinstance(value, list):
            for lib in value:
                rows.append(
                    [
                        f"blas ({lib.get('user_api', '?')})",
                        f"{lib.get('internal_api', '?')} {lib.get('version', '?')}, kernel "
                        f"{lib.get('architecture', '?')}, {lib.get('num_threads', '?')} threads",
                    ]
                )
        elif value not in (None, "", [], {}):
            rows.append([key, _scalar(value)])
    settings = {k: v for k, v in sub(run.doc, "settings").items() if v is not None}
    rows.append(["settings that change numbers", ", ".join(f"{k}={v}" for k, v in settings.items()) or "none set"])
    absent = [k for k, v in software.items() if v is None]
    if absent:
        rows.append(["not installed", ", ".join(absent)])
    return table(["software", "version"], rows, css="kv")


def _devices(runs: list[Run], catalog: Catalog) -> str:
    rows = []
    for dev in devices(runs).values():
        peak, method = sub(dev.info, "peak"), sub(dev.info, "peak").get("method", "–")
        peaks = ", ".join(f"{k} {v:.4g}" for k, v in sub(peak, "tflops").items())
        key = None if peaks else catalog.match(dev.name)
        if key:
            entry = catalog.devices[key]
            peaks = ", ".join(f"{k} {v:.4g}" for k, v in entry.get("peak_tflops", {}).items())
            method = f"datasheet {key} ({entry.get('as_of', '?')}), dense"
        bw, source = mem_gbps(dev, catalog)
        memory = num(dev.info.get("memory_bytes"))
        rows.append(
            [
                dev.label,
                dev.info.get("vendor", "–"),
                dev.info.get("kind", "–"),
                dev.info.get("arch", "–"),
                dev.info.get("compute_units", "–"),
                f"{memory / 2**30:.1f} GiB" if memory else "–",
                peaks or "–",
                f"{bw:.4g} GB/s ({source})" if bw else "unknown",
                method,
            ]
        )
    if not rows:
        return no_data("no backend reported a device")
    return table(
        [
            "device",
            "vendor",
            "kind",
            "arch",
            "units",
            "memory",
            "peak TFLOPS",
            "memory bandwidth",
            "how the peak was obtained",
        ],
        rows,
        numeric=(4,),
    )


def _backends(runs: list[Run]) -> str:
    rows = []
    for run in runs:
        for b in run.doc.get("backends") or []:
            state = (
                Raw('<span class="ok">available</span>')
                if b.get("available")
                else Raw('<span class="fail">unavailable</span>')
            )
            rows.append([run.path.name, b.get("name", "?"), state, b.get("reason") or "", len(b.get("devices") or [])])
    return (
        table(["file", "backend", "state", "reason", "devices"], rows, numeric=(4,))
        if rows
        else no_data("no backends section")
    )


def _skipped(runs: list[Run]) -> str:
    groups = not_ok(runs)
    if not groups:
        return note("every case ran and passed (status ok)")
    rows = [
        [g["status"], g["backend"], ", ".join(str(k) for k in g["kernels"]), g["cases"], g["reason"], g["run"]]
        for g in groups
    ]
    return table(
        ["status", "backend", "kernels", "cases", "reason", "file"],
        rows,
        numeric=(3,),
        bad=[g["status"] != "skipped" for g in groups],
    )


def summary(runs: list[Run], catalog: Catalog) -> str:
    """The summary section's body."""
    parts = [
        "<h3>Runs</h3>",
        _runs(runs),
        "<h3>Devices</h3>",
        _devices(runs, catalog),
        "<h3>Backends</h3>",
        _backends(runs),
        "<h3>Skipped and failed cases</h3>",
        _skipped(runs),
    ]
    for run in runs:
        title = f" — {escape(run.path.name)}" if len(runs) > 1 else ""
        parts += [
            f"<h3>Host and software stack{title}</h3>",
            '<div class="stack"><div>',
            _host(run),
            "</div><div>",
            _software(run),
            "</div></div>",
        ]
        warnings = [w for w in run.doc.get("warnings") or [] if w]
        if warnings:
            parts.append(table(["warning"], [[w] for w in warnings], bad=[True] * len(warnings)))
    return "\n".join(parts)
