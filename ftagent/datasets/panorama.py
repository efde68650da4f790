"""PANORAMA: USPTO examination records turned into PAR4PC / PI4PC / NOC4PC tasks."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from ftagent.datasets.base import DatasetSpec, FunctionSource

_EVAL_NAME = re.compile(r"(^|[^a-z])(test|validation)([^a-z]|$)", re.IGNORECASE)


def is_eval_name(name: str) -> bool:
    """True for file/folder names that denote an evaluation split (``test.parquet``, ``validation/`` ...)."""
    return bool(_EVAL_NAME.search(name))


def remove_eval_splits(dataset_dir: Path) -> list[str]:
    """Post-download hook: delete every file or folder named like a test/validation split.

    Returns:
        The removed paths, relative to ``dataset_dir``.
    """
    root = Path(dataset_dir)
    removed = []
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts)):
        if not path.exists() or path.name.startswith(".") or not is_eval_name(path.name):
            continue
        removed.append(str(path.relative_to(root)))
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    return removed


def to_alpaca(dataset_dir, limit=None, seed=0):
    """Alpaca rows from ``<TASK>/train*.parquet`` for PAR4PC, PI4PC and NOC4PC (JSON-only answers)."""
    import json
    import random
    from pathlib import Path

    import pandas as pd

    def plain(value):
        if isinstance(value, str) and value[:1] in "[{":
            try:
                value = json.loads(value)
            except ValueError:
                return value
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    def claim_text(context, number):
        claims = context.get("claims") or []
        return claims[number - 1] if 0 < number <= len(claims) else ""

    def header(rec, context, number):
        return (f"Application {rec['application_number']}: {context.get('title', '')}\n"
                f"Abstract: {context.get('abstract', '')}\nClaim {number}: {claim_text(context, number)}\n")

    def par4pc(rec):
        ctx, num = plain(rec["context"]), int(rec["claim_number"])
        opts = plain(rec["options"])
        lines = [f"{k}. {v.get('patent_id', '')} {v.get('title', '')}: {v.get('abstract', '')}"
                 for k, v in sorted(opts.items()) if v]
        prompt = (header(rec, ctx, num) + "Candidate prior art:\n" + "\n".join(lines) +
                  f"\nWhich candidates (A-H) were cited to reject claim {num}? "
                  'Reply with JSON only, e.g. {"answer": ["A", "C"]}.')
        gold = sorted(str(x) for x in plain(rec["gold_answers"]))
        return prompt, json.dumps({"answer": gold})

    def pi4pc(rec):
        ctx, num = plain(rec["context"]), int(rec["claim_number"])
        spec, opts = plain(rec["prior_art_specification"]), plain(rec["options"])
        lines = [f"{k}: {v}" for k, v in sorted(opts.items(), key=lambda kv: int(kv[0]))]
        prompt = (header(rec, ctx, num) + f"Prior art {spec.get('patent_id', '')}: {spec.get('title', '')}\n"
                  "Paragraphs:\n" + "\n".join(lines) +
                  f"\nWhich single paragraph key is most relevant to rejecting claim {num}? "
                  'Reply with JSON only, e.g. {"answer": 12}.')
        return prompt, json.dumps({"answer": int(plain(rec["gold_answers"])[0])})

    def noc4pc(rec):
        ctx, num = plain(rec["context"]), int(rec["claim_number"])
        arts = plain(rec["prior_art_specifications"]) or []
        lines = [f"--- Prior art #{i + 1}: {a.get('patent_id', '')} {a.get('title', '')}: {a.get('abstract', '')}"
                 for i, a in enumerate(arts)]
        answer = plain(rec["answer"])
        if not isinstance(answer, dict):
            answer = {"reason": "", "code": str(answer)}
        prompt = (header(rec, ctx, num) + "\n".join(lines) +
                  f"\nIs claim {num} allowable (ALLOW) or rejected under 35 U.S.C. 102 or 103? "
                  'Reply with JSON only: {"reason": "...", "code": "ALLOW" | "102" | "103"}.')
        return prompt, json.dumps({"reason": answer.get("reason", ""), "code": str(answer.get("code"))})

    builders = {"PAR4PC": par4pc, "PI4PC": pi4pc, "NOC4PC": noc4pc}
    rows = []
    for task, build in builders.items():
        for path in sorted((Path(dataset_dir) / task).glob("train*.parquet")):
            for rec in pd.read_parquet(path).to_dict(orient="records"):
                try:
                    prompt, output = build(rec)
                except (KeyError, ValueError, TypeError, IndexError, AttributeError):
                    continue
                rows.append({"instruction": prompt, "input": "", "output": output})
    random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


SOURCE = FunctionSource(
    spec=DatasetSpec(
        name="panorama",
        repo_id="LG-AI-Research/PANORAMA",
        related_benchmarks=["panorama", "panorama_*"],
        task_type="legal reasoning (patents)",
        license="CC-BY-NC-4.0",
        summary="USPTO prior-art retrieval, paragraph identification and allowability classification",
        hook_description="every file/folder named *test* or *validation* is deleted (benchmark splits)",
        allow_patterns=["PAR4PC/train*", "PI4PC/train*", "NOC4PC/train*", "README.md"],  # what the converter reads
    ),
    converter=to_alpaca,
    hook=remove_eval_splits,
)
