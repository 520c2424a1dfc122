"""The GPU check's one JSON file, written phase by phase, and the Markdown table made from it.

    python3 tools/gpu_check_report.py init OUT/gpu_check.json --mode gpu --budget 540
    python3 tools/gpu_check_report.py phase OUT/gpu_check.json --name train_135m --rc 0 \\
        --seconds 41.2 --budget 60 --figures train:OUT/train_135m
    python3 tools/gpu_check_report.py phase OUT/gpu_check.json --name trl_135m --skip "no CUDA"
    python3 tools/gpu_check_report.py --render OUT/gpu_check.json [--write docs/benchmarks.md]

``tools/gpu_check.sh`` calls ``init`` once (the machine) and ``phase`` after each phase (its
status from the exit code: 0 passed, 124 or 137 timed out under ``timeout``, else failed; its
figures read from what the phase wrote). The file is rewritten whole after each phase (through a
temporary file), so a check stopped at any point leaves valid JSON with the phases done so far.
``--render`` turns it into the table ``docs/benchmarks.md`` shows, with the targets of issue 77
marked met or missed; ``--write`` puts that between the ``gpu-check`` markers of a Markdown file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # framework, for the CPU's name

from gpu_check_figures import FIGURES, machine_record

SCHEMA = 1
STATUSES = ("passed", "failed", "timed_out", "skipped")
MODES = ("gpu", "cpu")
#: exit codes of a command stopped by ``timeout`` (TERM, then KILL after ``-k``)
TIMED_OUT_RCS = (124, 137)
BEGIN, END = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"
#: issue 77's GPU targets
SAMPLES_RATIO_TARGET = 2.0  # seekrl / TRL samples/s, at least
DECODE_RATIO_TARGET = 0.7  # decode tokens/s / a warmed-up generate's, at least
#: the shapes of the side-by-side phases: phase name -> the shape as the table names it
TRL_PHASES = {"trl_135m": "135M (smollm2-135m)", "trl_1p5b": "1.5B (qwen2.5-1.5b)"}


class GpuCheckError(ValueError):
    """A gpu_check.json that does not hold what the check writes (every problem, one a line)."""


def problem(field: str, got: object, expected: str, fix: str) -> str:
    return f"[gpu_check.{field}] got {got!r}; expected {expected}. Fix: {fix}."


# -- the JSON ---------------------------------------------------------------------------------------
def read(path: Path) -> dict[str, Any]:
    """The check's JSON, validated.

    Raises:
        GpuCheckError: not JSON, or a field missing or of the wrong kind (all of them listed).
    """
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GpuCheckError(
            problem(
                "file",
                str(path),
                f"a readable JSON file ({type(exc).__name__}: {exc})",
                "point --render at the gpu_check.json that tools/gpu_check.sh wrote",
            )
        ) from None
    problems = validate(data)
    if problems:
        raise GpuCheckError("\n".join(problems))
    return data  # type: ignore[no-any-return]  # validated above


def validate(data: object) -> list[str]:
    """Every problem of ``data`` as the check's JSON (empty: none)."""
    fix = "rerun tools/gpu_check.sh, or correct the field by hand"
    if not isinstance(data, dict):
        return [problem("", type(data).__name__, "an object", fix)]
    out = []
    if data.get("schema") != SCHEMA:
        out.append(problem("schema", data.get("schema"), str(SCHEMA), fix))
    if data.get("mode") not in MODES:
        out.append(problem("mode", data.get("mode"), " or ".join(MODES), fix))
    if not isinstance(data.get("machine"), dict):
        out.append(problem("machine", data.get("machine"), "an object", fix))
    phases = data.get("phases")
    if not isinstance(phases, list):
        return [*out, problem("phases", phases, "a list", fix)]
    for i, p in enumerate(phases):
        where = f"phases[{i}]"
        if not isinstance(p, dict):
            out.append(problem(where, p, "an object", fix))
            continue
        if not isinstance(p.get("name"), str):
            out.append(problem(f"{where}.name", p.get("name"), "a phase name", fix))
        status = p.get("status")
        if status not in STATUSES:
            out.append(problem(f"{where}.status", status, "one of " + ", ".join(STATUSES), fix))
        elif status != "passed" and not isinstance(p.get("reason"), str):
            out.append(problem(f"{where}.reason", p.get("reason"), f"why it {status}", fix))
        if not isinstance(p.get("seconds"), int | float):
            out.append(problem(f"{where}.seconds", p.get("seconds"), "a number", fix))
        figures = p.get("figures")
        if not isinstance(figures, dict):
            out.append(problem(f"{where}.figures", figures, "an object", fix))
        elif status == "passed":
            out += figure_problems(where, str(p.get("name")), figures, fix)
    return out


#: what a passed phase's figures hold (what the table reads)
REQUIRED_FIGURES = {
    "gpu_tests": ("passed", "failed", "skipped"),
    "train_135m": ("steps", "steps_per_s", "samples_per_s", "optimizer_steps_per_step"),
    "train_1p5b": ("steps", "steps_per_s", "samples_per_s", "optimizer_steps_per_step"),
    "decode_graphs": ("rollouts", "new_tokens", "variants"),
    **{name: ("seekrl_samples_per_s", "trl_samples_per_s", "ratio_samples") for name in TRL_PHASES},
}


def figure_problems(where: str, name: str, figures: dict[str, Any], fix: str) -> list[str]:
    """Figures a passed phase lacks, and decoding variants that are neither measured (with their
    tokens/s) nor skipped (with a reason)."""
    out = [
        problem(f"{where}.figures.{key}", None, f"the {name} phase's {key}", fix)
        for key in REQUIRED_FIGURES.get(name, ())
        if key not in figures
    ]
    variants = figures.get("variants") if name == "decode_graphs" else {}
    for v, d in (variants if isinstance(variants, dict) else {}).items():
        at = f"{where}.figures.variants.{v}"
        if not isinstance(d, dict) or d.get("status") not in ("measured", "skipped"):
            out.append(problem(f"{at}.status", d, "measured or skipped", fix))
        elif d["status"] == "measured" and not isinstance(d.get("tokens_per_s"), int | float):
            out.append(problem(f"{at}.tokens_per_s", d.get("tokens_per_s"), "a number", fix))
    return out


def write(path: Path, data: dict[str, Any]) -> None:
    """``data`` to ``path`` whole, through a temporary file (never half a file)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def init(path: Path, mode: str, budget: float, bundle: str) -> dict[str, Any]:
    """A new check's JSON: the machine and no phases yet."""
    data = {
        "schema": SCHEMA,
        "mode": mode,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "budget_s": budget,
        "bundle": bundle,
        "machine": machine_record(),
        "phases": [],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, data)
    return data


def status_of(rc: int) -> str:
    if rc == 0:
        return "passed"
    return "timed_out" if rc in TIMED_OUT_RCS else "failed"


def phase_record(
    name: str,
    *,
    rc: int | None,
    seconds: float,
    budget: float | None,
    figures: str | None = None,
    log: str | None = None,
    skip: str | None = None,
) -> dict[str, Any]:
    """One phase: its status (``skip``: skipped for that reason; else from ``rc``), time, budget
    and figures (``kind:path``, read by :data:`FIGURES`).

    A passed phase whose figures cannot be read has failed; a phase that failed or timed out keeps
    whatever figures it wrote. A pytest phase whose every test skipped itself (no CUDA) is
    skipped, with their reasons."""
    record: dict[str, Any] = {"name": name, "seconds": round(seconds, 1), "budget_s": budget}
    if log:
        record["log"] = log
    if skip is not None:
        return {**record, "status": "skipped", "reason": skip, "figures": {}}
    if rc is None:
        raise ValueError(f"[phase {name}] got neither --rc nor --skip. Fix: pass one.")
    status = status_of(rc)
    reason = {
        "passed": None,
        "timed_out": f"stopped by its budget of {budget or 0:g} s (exit {rc})",
        "failed": f"exit {rc}",
    }[status]
    got: dict[str, Any] = {}
    kind, _, where = (figures or "").partition(":")
    if kind:
        try:
            got = FIGURES[kind](Path(where))
        except (OSError, ValueError, KeyError, ET.ParseError) as exc:
            if status == "passed":
                status, reason = "failed", f"ran, but its figures are unreadable ({exc!r})"
    if kind == "pytest" and status == "passed" and got["passed"] == 0 and got["skipped"]:
        status = "skipped"
        reason = f"all {got['skipped']} tests skipped: " + "; ".join(got["skip_reasons"])
    if status == "failed" and log:
        reason = f"{reason}; log: {log}"
    return {**record, "status": status, "reason": reason, "figures": got}


def append_phase(path: Path, record: dict[str, Any]) -> None:
    """``record`` added to the check's JSON at ``path``."""
    data = read(path)
    data["phases"].append(record)
    write(path, data)


# -- the Markdown -----------------------------------------------------------------------------------
def _num(x: object, fmt: str = ".2f") -> str:
    return format(x, fmt) if isinstance(x, int | float) else "?"


def phase_cell(p: dict[str, Any]) -> str:
    """A phase's figures in a few words; for one that did not pass, why, and the figures it had
    written before it stopped (a train run's steps so far, the decoding variants measured)."""
    if p["status"] == "passed":
        return figures_cell(p["name"], p["figures"])
    if p["status"] == "skipped":
        return str(p["reason"])
    try:
        return f"{p['reason']}; so far: {figures_cell(p['name'], p['figures'])}"
    except (KeyError, TypeError, AttributeError):  # none, or not the whole set
        return str(p["reason"])


def figures_cell(name: str, f: dict[str, Any]) -> str:
    """A phase's figures in a few words (KeyError: a figure it needs is missing)."""
    if not f:
        raise KeyError("no figures")
    if name == "gpu_tests":
        return f"{f['passed']} passed, {f['failed']} failed, {f['skipped']} skipped"
    if name.startswith("train_"):
        gpu = f"peak GPU {_num(f['peak_gpu_gb'])} GB" if f.get("peak_gpu_gb") else "no GPU"
        return (
            f"{f['steps']} step{'' if f['steps'] == 1 else 's'}, {_num(f['steps_per_s'], '.3f')} steps/s, "
            f"{_num(f['samples_per_s'])} samples/s, {f['optimizer_steps_per_step']:g} optimiser "
            f"steps a step, {_num(f['rollout_tokens_per_s'], '.0f')} rollout tokens/s, {gpu}"
        )
    if name == "decode_graphs":
        parts = []
        for v, d in f["variants"].items():
            if d["status"] != "measured":
                parts.append(f"{v} {d['status']}")
            else:
                ratio = "" if v == "generate" else f" ({_num(d.get('ratio_to_generate'))}x)"
                parts.append(f"{v} {_num(d['tokens_per_s'], '.0f')} tokens/s{ratio}")
        head = f"{f['rollouts']} rollouts x {f['new_tokens']} tokens: "
        return head + "; ".join(parts) + f"; faster: {f.get('faster') or '?'}"
    if name in TRL_PHASES:
        return (
            f"seekrl {_num(f['seekrl_samples_per_s'])} samples/s, TRL "
            f"{_num(f['trl_samples_per_s'])} ({_num(f['ratio_samples'])}x); peak GPU "
            f"{_num(f['seekrl_peak_gpu_gb'])} / {_num(f['trl_peak_gpu_gb'])} GB"
        )
    return json.dumps(f, sort_keys=True)


def target_rows(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(target, figure, verdict)`` for each target of issue 77: met or missed; not measured
    when its phase did not pass; not judged in a --cpu run (GPU targets)."""
    phases = {p["name"]: p for p in data["phases"]}
    judge = (lambda ok: "met" if ok else "missed") if data["mode"] == "gpu" else None

    def verdict(ok: bool) -> str:
        return judge(ok) if judge is not None else "not judged (cpu mode)"

    def absent(name: str) -> tuple[str, str]:
        p = phases.get(name)
        return ("not run" if p is None else f"{name} {p['status']}: {p['reason']}"), "not measured"

    rows: list[tuple[str, str, str]] = []
    for name, shape in TRL_PHASES.items():
        speed, memory = (
            f"{shape}: samples/s at least 2x TRL's",
            f"{shape}: peak GPU memory at most TRL's",
        )
        p = phases.get(name)
        if p is None or p["status"] != "passed":
            rows += [(speed, *absent(name)), (memory, *absent(name))]
            continue
        f = p["figures"]
        ratio, ours, theirs = (
            f["ratio_samples"],
            f.get("seekrl_peak_gpu_gb"),
            f.get("trl_peak_gpu_gb"),
        )
        pair = f"{f['seekrl_samples_per_s']:.2f} / {f['trl_samples_per_s']:.2f}"
        rows.append((speed, f"{ratio:.2f}x ({pair})", verdict(ratio >= SAMPLES_RATIO_TARGET)))
        if ours is None or theirs is None:
            rows.append((memory, "no GPU figure", "not measured"))
        else:
            gb = f"{ours:.2f} / {theirs:.2f} GB ({ours / theirs:.2f}x)"
            rows.append((memory, gb, verdict(ours <= theirs)))
    decode = phases.get("decode_graphs")
    # the decoding bench writes its JSON after each variant: a phase stopped by its budget keeps
    # the variants it measured
    variants = decode["figures"].get("variants") if decode is not None else None
    usable = decode is not None and (
        decode["status"] == "passed" or (decode["status"] == "timed_out" and variants)
    )
    for variant, what in (("loop", "the decoding loop (default)"), ("graphs", "CUDA graphs")):
        target = f"decode at 64 rollouts, {what}: at least 0.7 of a warmed-up generate"
        if not usable or not isinstance(variants, dict):
            rows.append((target, *absent("decode_graphs")))
            continue
        d = variants.get(variant, {"status": "not run"})
        ratio = d.get("ratio_to_generate")
        if d["status"] != "measured" or ratio is None:
            why = d.get("reason", d["status"]) if d["status"] != "measured" else "no generate run"
            rows.append((target, f"{variant}: {why}", "not measured"))
        else:
            rows.append((target, f"{ratio:.2f}x", verdict(ratio >= DECODE_RATIO_TARGET)))
    return rows


def machine_line(data: dict[str, Any]) -> str:
    """The machine, the versions and the commit, and the time the phases took, as one line."""
    m = data["machine"]
    gpu = f"{m['gpu']} ({m['gpu_memory']}, driver {m['driver']})" if m.get("gpu") else "no GPU"
    cuda = f"CUDA {m['cuda']}" if m.get("cuda") else "no CUDA build"
    trl = f", trl {m['trl']}" if m.get("trl") else ", no TRL"
    spent = sum(p["seconds"] for p in data["phases"])
    return (
        f"Machine: {gpu}; {m.get('cpus')} x {m.get('cpu')}; torch {m.get('torch')} ({cuda}), "
        f"transformers {m.get('transformers')}, lightning {m.get('lightning')}{trl}; commit "
        f"{m.get('commit')}. Started {data.get('started')}, {data['mode']} mode; the phases took "
        f"{spent:.0f} s of a {_num(data.get('budget_s'), '.0f')} s budget."
    )


def render(data: dict[str, Any]) -> str:
    """The Markdown of a check: the machine, a row per phase, the targets."""
    lines = [
        machine_line(data),
        "",
        "| phase | status | seconds (budget) | figures |",
        "|---|---|---|---|",
    ]
    for p in data["phases"]:
        budget = "" if p.get("budget_s") is None else f" ({_num(p['budget_s'], '.0f')})"
        status = p["status"].replace("_", " ")
        lines.append(f"| {p['name']} | {status} | {p['seconds']:.1f}{budget} | {phase_cell(p)} |")
    lines += ["", "| target (issue 77) | figure | verdict |", "|---|---|---|"]
    lines += [f"| {t} | {fig} | {v} |" for t, fig, v in target_rows(data)]
    decode = next((p for p in data["phases"] if p["name"] == "decode_graphs"), None)
    if decode is not None and decode["status"] == "passed" and decode["figures"].get("faster"):
        faster = decode["figures"]["faster"]
        lines += [
            "",
            f"Faster at {decode['figures']['rollouts']} rollouts: **{faster}**"
            + (
                " (CUDA graphs): the rollout default should switch to them."
                if faster == "graphs"
                else " (the eager decoding loop, the default): keep it."
            ),
        ]
    return "\n".join(lines) + "\n"


def write_between_markers(doc: Path, text: str) -> None:
    """``text`` in place of what lies between the gpu-check markers of ``doc``.

    Raises:
        GpuCheckError: ``doc`` lacks a marker, or has them out of order.
    """
    old = doc.read_text()
    begin, end = old.find(BEGIN), old.find(END)
    if begin < 0 or end < begin:
        raise GpuCheckError(
            f"[--write] got {doc} without {BEGIN} ... {END} in that order; expected both "
            f"markers around the table. Fix: add the two lines where the table goes."
        )
    doc.write_text(old[: begin + len(BEGIN)] + "\n" + text + old[end:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--render", metavar="JSON", help="print the Markdown of a check's JSON")
    p.add_argument("--write", metavar="MD", help="with --render: put it between the markers")
    sub = p.add_subparsers(dest="command")
    i = sub.add_parser("init", help="a new JSON with this machine")
    i.add_argument("json")
    i.add_argument("--mode", choices=MODES, required=True)
    i.add_argument("--budget", type=float, required=True)
    i.add_argument("--bundle", default="none", help="what offline bundle was sourced")
    ph = sub.add_parser("phase", help="append one phase")
    ph.add_argument("json")
    ph.add_argument("--name", required=True)
    ph.add_argument("--rc", type=int, help="the phase's exit code")
    ph.add_argument("--skip", help="skipped, for this reason")
    ph.add_argument("--seconds", type=float, default=0.0)
    ph.add_argument("--budget", type=float, default=None)
    ph.add_argument("--figures", help="kind:path, kind one of " + ", ".join(FIGURES))
    ph.add_argument("--log", help="the phase's log, relative to the JSON's folder")
    args = p.parse_args(argv)
    try:
        if args.render:
            text = render(read(Path(args.render)))
            if args.write:
                write_between_markers(Path(args.write), text)
            print(text, end="")
        elif args.command == "init":
            init(Path(args.json), args.mode, args.budget, args.bundle)
        elif args.command == "phase":
            record = phase_record(
                args.name,
                rc=args.rc,
                seconds=args.seconds,
                budget=args.budget,
                figures=args.figures,
                log=args.log,
                skip=args.skip,
            )
            append_phase(Path(args.json), record)
            print(
                f"gpu_check: {args.name} {record['status']}"
                + (f" ({record['reason']})" if record["reason"] else "")
            )
        else:
            p.error("give --render JSON, init or phase")
    except GpuCheckError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
