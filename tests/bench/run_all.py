"""Run the benchmarks (``make bench``): ratios measured side by side in one run.

Usage::

    FT_TOOLS_ENV=/tmp/warm/tools python -m tests.bench.run_all [--quick] [--only train|eval|demo|guard|stages|gpu|trials]
        [--session DIR | --run-demo] [--gpu] [--work DIR] [--out bench-results.json]   (stages: issue 40, DPO and
        GRPO against SFT on the demo)

Each measurement is printed as it is taken; the end prints a Markdown table and writes the JSON.
The machine's load average is recorded before and after: numbers from a busy machine are slower.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

from tests.bench.common import BenchResults, load_average, machine_info, summary_table, tools_env_from_environ

SECTIONS = ("train", "eval", "demo", "guard", "stages", "gpu", "trials")
DEFAULT_SESSION_ROOT = Path(os.environ.get("LOG_PATH", "log"))  # where `make demo` writes sessions


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m tests.bench.run_all", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200 training steps, 10/40 eval items, a 1-layer guard checkpoint")
    p.add_argument("--only", choices=SECTIONS, help="run one section")
    p.add_argument("--session", type=Path, help="demo session folder (holding events.jsonl) to analyse")
    p.add_argument("--run-demo", action="store_true", help="run `ftagent demo` first and analyse its session")
    p.add_argument("--gpu", action="store_true", help="also run the vLLM vs HF section (skipped without a GPU)")
    p.add_argument("--repeats", type=int, default=2, help="training runs per side (ABBA order)")
    p.add_argument("--sandbox", default="auto", choices=("auto", "bwrap", "none"), help="LocalRunner sandbox")
    p.add_argument("--work", type=Path, help="scratch folder (default: a new temporary one)")
    p.add_argument("--out", type=Path, default=Path("bench-results.json"), help="JSON output file")
    return p.parse_args(argv)


def selected(args: argparse.Namespace) -> list[str]:
    """The sections to run: ``--only``, else train/eval/demo/guard/trials (+ gpu with ``--gpu``)."""
    if args.only:
        return [args.only]
    return ["train", "eval", "demo", "guard", "stages", "trials"] + (["gpu"] if args.gpu else [])


def find_session(args: argparse.Namespace, work: Path, tools_env: Path | None) -> Path | None:
    """``--session``, else a fresh ``ftagent demo`` (``--run-demo``), else the newest finished demo
    session (one whose events end with ``session_end``) under ``LOG_PATH`` (default ``./log``)."""
    from tests.bench import demo_bench

    if args.session:
        return args.session
    if args.run_demo:
        if tools_env is None:
            raise RuntimeError("--run-demo needs FT_TOOLS_ENV")
        return demo_bench.run_demo(work, tools_env)
    finished = [p for p in sorted(DEFAULT_SESSION_ROOT.glob("*/events.jsonl"))
                if '"session_end"' in p.read_text(encoding="utf-8")]
    return finished[-1].parent if finished else None


def _section(res: BenchResults, name: str, fn: Callable[[], None]) -> None:
    print(f"\n== {name} (load average {load_average()}) ==", flush=True)
    try:
        fn()
    except Exception as exc:  # one broken section must not hide the others' numbers
        traceback.print_exc()
        res.errors[name] = f"{type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    """Run the selected sections; return 1 when a section failed."""
    args = parse_args(argv)
    for key, value in {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                       "TRANSFORMERS_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}.items():
        os.environ.setdefault(key, value)
    work = args.work or Path(tempfile.mkdtemp(prefix="ftbench-"))
    work.mkdir(parents=True, exist_ok=True)
    tools_env = tools_env_from_environ()
    res = BenchResults(machine=machine_info(),
                       options={"quick": args.quick, "sections": selected(args), "work": str(work),
                                "tools_env": str(tools_env) if tools_env else None, "sandbox": args.sandbox,
                                "repeats": args.repeats})
    print(f"bench: {res.machine}; work dir {work}", flush=True)
    for name in selected(args):
        if name in ("train", "eval", "stages") and tools_env is None:
            res.skipped[name] = "FT_TOOLS_ENV is not set to a tool env (run `make tools`)"
            print(f"[{name}] skipped: {res.skipped[name]}", flush=True)
            continue
        if name == "train":
            from tests.bench import train_bench

            _section(res, name, lambda: train_bench.run(res, tools_env, work, args.quick, args.sandbox, args.repeats))
        elif name == "eval":
            from tests.bench import eval_bench

            _section(res, name, lambda: eval_bench.run(res, tools_env, work, args.quick))
        elif name == "guard":
            from tests.bench import guard_bench

            _section(res, name, lambda: guard_bench.run(res, work, args.quick))
        elif name == "stages":
            from tests.bench import stage_bench

            _section(res, name, lambda: stage_bench.run(res, tools_env, work, args.quick))
        elif name == "trials":
            from tests.bench import trials_bench

            _section(res, name, lambda: trials_bench.run(res, tools_env, work, args.quick))
        elif name == "gpu":
            from tests.bench import eval_bench

            _section(res, name, lambda: eval_bench.run_gpu(res, tools_env, work, args.quick))
        elif name == "demo":
            from tests.bench import demo_bench

            def _demo() -> None:
                session = find_session(args, work, tools_env)
                if session is None:
                    res.skipped["demo"] = "no finished session: pass --session DIR or --run-demo"
                    print(f"[demo] skipped: {res.skipped['demo']}", flush=True)
                    return
                demo_bench.analyse(res, session)
                from tests.bench import eval_bench

                eval_bench.analyse_demo(res, session)  # the report's evaluation / training walls

            _section(res, name, _demo)
    res.machine["loadavg_at_end"] = load_average()
    print("\n" + summary_table(res))
    print(f"\nload average at start {res.machine['loadavg_1_5_15']}, at end {res.machine['loadavg_at_end']}")
    print(f"wrote {res.write_json(args.out)}")
    return 1 if res.errors else 0


if __name__ == "__main__":
    sys.exit(main())
