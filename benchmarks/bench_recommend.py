"""Wall time of a cold `specband recommend -b 16` (lookup_table, embedded policy).

Not a test: it prints figures. Target (issue 21, item 2; issue 12 asked 0.3 s): median
under 0.15 s over at least 10 cold runs on the 2-core development machine. Each run is a new process (the console
script `specband` next to this Python, else `python -m specband`) in an empty folder, so
no ./specband-models is used; one untimed run first writes the bytecode caches, as an
installed package has them.

The series runs twice unless told otherwise: as the machine is, and with --busy
processes spinning on the CPU meanwhile (default: one per core). The 1-minute load
average is printed with each series, since other work on the machine shifts the wall
time; the CPU time (user + system) of each run, which load shifts much less, is printed
beside it.

Usage:
    python benchmarks/bench_recommend.py [--runs 15] [--busy N] [--only quiet|busy]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def specband_command() -> list[str]:
    """The installed `specband` script beside this interpreter, else `python -m specband`."""
    script = Path(sys.executable).with_name("specband")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    found = shutil.which("specband")
    return [found] if found else [sys.executable, "-m", "specband"]


def time_recommend(runs: int, extra: list[str], cwd: str | None = None, cpu: list[float] | None = None) -> list[float]:
    """Wall times (s) of ``runs`` cold `specband recommend --batch-size 16 EXTRA` processes;
    each one's CPU time (user + system, s) is appended to ``cpu`` when given."""
    out = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(
            [*specband_command(), "recommend", "--batch-size", "16", *extra],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
        )
        out.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if cpu is not None:
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return out


def time_interpreter(runs: int) -> list[float]:
    """Wall times (s) of `python -c pass`: the floor under any Python command."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        out.append(time.perf_counter() - start)
    return out


@contextmanager
def busy_cpus(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU for the duration of the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0)  # let them start spinning
        yield
    finally:
        for proc in spinners:
            proc.kill()
        for proc in spinners:
            proc.wait()


def report(label: str, runs: int, cwd: str) -> None:
    load_before = os.getloadavg()[0]
    floor = time_interpreter(5)
    cpu: list[float] = []
    times = time_recommend(runs, [], cwd=cwd, cpu=cpu)
    load_after = os.getloadavg()[0]
    print(
        f"{label}: cold `specband recommend -b 16` median {statistics.median(times):.3f} s "
        f"(min {min(times):.3f}, max {max(times):.3f}) over {runs} runs, CPU time median "
        f"{statistics.median(cpu):.3f} s; `python -c pass` median "
        f"{statistics.median(floor):.3f} s; 1-min load average {load_before:.2f} -> {load_after:.2f} "
        f"on {os.cpu_count()} cores   (target < 0.15 s, issue 21)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed cold runs per series (>= 10)")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="CPU spinners in the busy series")
    parser.add_argument("--only", choices=("quiet", "busy"), help="run one series only")
    args = parser.parse_args()
    if args.runs < 10:
        parser.error("--runs must be >= 10")
    print(f"command: {' '.join(specband_command())} recommend -b 16")
    with tempfile.TemporaryDirectory() as cwd:
        time_recommend(1, [], cwd=cwd)  # bytecode caches, as an installed package has them
        if args.only in (None, "quiet"):
            report("as the machine is", args.runs, cwd)
        if args.only in (None, "busy"):
            with busy_cpus(args.busy):
                report(f"with {args.busy} CPU spinner(s)", args.runs, cwd)


if __name__ == "__main__":
    main()
