"""ChemCoTDataset: chain-of-thought data for molecule understanding/editing/optimisation and reactions."""

from __future__ import annotations

import json
from pathlib import Path

from ftagent.datasets.base import DatasetSpec, FunctionSource

RCR_FILE = Path("chemcotbench-cot") / "rxn" / "rcr.json"
_FENCE_OPEN = "```json"
_FENCE_CLOSE = "```"


def normalize_rcr_record(rec: dict) -> dict:
    """Bring one ``rcr.json`` record to the schema of the other files.

    ``gt`` moves into ``meta`` (kept a JSON string), ``cot_result`` becomes ``struct_cot`` without its
    Markdown json fence. Already-normalised records pass through unchanged.
    """
    rec = dict(rec)
    if "gt" in rec:
        meta = rec.get("meta") or {}
        if isinstance(meta, str):
            meta = json.loads(meta) if meta.strip() else {}
        meta["gt"] = rec.pop("gt")
        rec["meta"] = json.dumps(meta, ensure_ascii=False)
    if "cot_result" in rec:
        cot = str(rec.pop("cot_result") or "").strip()
        if cot.startswith(_FENCE_OPEN):
            cot = cot[len(_FENCE_OPEN):]
        elif cot.startswith(_FENCE_CLOSE):
            cot = cot[len(_FENCE_CLOSE):]
        if cot.endswith(_FENCE_CLOSE):
            cot = cot[: -len(_FENCE_CLOSE)]
        rec["struct_cot"] = cot.strip()
    return rec


def fix_rcr_schema(dataset_dir: Path) -> None:
    """Post-download hook: normalise ``chemcotbench-cot/rxn/rcr.json`` in place (idempotent)."""
    path = Path(dataset_dir) / RCR_FILE
    if not path.exists():
        return
    records = json.loads(path.read_text(encoding="utf-8"))
    fixed = [normalize_rcr_record(r) for r in records]
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(fixed, ensure_ascii=False, indent=2), encoding="utf-8")
    tmp.replace(path)


def to_alpaca(dataset_dir, limit=None, seed=0):
    """Alpaca rows from every ``chemcotbench-cot/**/*.json``: query → structured CoT + JSON answer.

    The answer is a JSON object under the key the query names ("with key count", or a template such
    as ``{"output": ...}`` in the query), else under ``answer``, which the benchmark reads for every
    sub-task.
    """
    import json
    import random
    import re
    from pathlib import Path

    def decode_cot(cot):
        # struct_cot is a JSON-encoded string, sometimes encoded twice and wrapped in a ```json
        # fence: decode until it is plain text or an object, so the target is not escaped JSON
        for _ in range(4):
            if not isinstance(cot, str):
                break
            text = cot.strip()
            fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
            text = fenced.group(1) if fenced else text
            if text[:1] not in ('"', "{", "["):
                return text
            try:
                cot = json.loads(text)
            except ValueError:
                return text
        return cot.strip() if isinstance(cot, str) else json.dumps(cot, ensure_ascii=False, indent=2)

    def answer_key(query):
        named = re.search(r"\bkeys?\s+[\"'`]?([A-Za-z][\w ]*?)[\"'`]?(?:[.,;:]|\s*$)", query)
        template = re.search(r'\{\s*"([^"]+)"\s*:', query)
        found = named or template
        return found.group(1).strip() if found else "answer"

    rows = []
    for path in sorted((Path(dataset_dir) / "chemcotbench-cot").rglob("*.json")):
        for rec in json.loads(path.read_text(encoding="utf-8")):
            query = (rec.get("query") or "").strip()
            cot = decode_cot(rec.get("struct_cot") or rec.get("raw_cot") or "")
            if not query or not cot:
                continue
            meta = rec.get("meta") or {}
            if isinstance(meta, str):
                try:
                    meta = json.loads(meta)
                except ValueError:
                    meta = {}
            gt = meta.get("gt", meta.get("reference")) if isinstance(meta, dict) else None
            output = cot
            tail = cot.rstrip()[-300:]
            answered = tail.endswith(("}", "```")) and str(gt) in tail  # the CoT already ends in its JSON
            if gt is not None and not answered:
                output += "\n\n```json\n" + json.dumps({answer_key(query): gt}, ensure_ascii=False) + "\n```"
            rows.append({"instruction": query, "input": "", "output": output})
    random.Random(seed).shuffle(rows)
    return rows if limit is None else rows[:limit]


SOURCE = FunctionSource(
    spec=DatasetSpec(
        name="chemcot",
        repo_id="OpenMol/ChemCoTDataset",
        related_benchmarks=["chemcotbench", "chemcotbench_*"],
        task_type="chemistry",
        license="MIT (card) / CC BY 4.0 (GitHub badge): unsettled",
        summary="molecule understanding, editing, optimisation and reaction prediction with CoT",
        hook_description="rxn/rcr.json: gt moved into meta, cot_result → struct_cot without code fence",
        gated=True,  # redirects to IDEA-AI4S/ChemCoTDataset: HF_TOKEN + accepted terms
    ),
    converter=to_alpaca,
    hook=fix_rcr_schema,
)
