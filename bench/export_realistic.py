"""Keep a realistic set's batch in docs/data: every attempt, the ranker's examples, the batch's
summary and results, and the tables of ``bench_realistic.py``.

    python bench/export_realistic.py BATCH_FOLDER docs/data/realistic-DATE-SET

Writes attempts.jsonl (task, attempt, strategy, status, candidate/eager/compile ms),
ranker_examples.jsonl (``ranker.Example`` records, as ``bench_ranker_update.py`` reads them),
and copies batch.json, results.jsonl and summary.md; then run ``bench_realistic.py FOLDER --md
OUT/tables.md > OUT/tables.txt`` for the tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sqlite3
from pathlib import Path

from kforge.agent.policy.ranker_data import load_examples


def attempts(folder: Path) -> list[dict[str, object]]:
    rows = []
    for db in sorted(folder.glob("runs/*/*/trajectories.db")):
        task = db.parent.parent.name
        query = "select a.attempt_id, a.strategy, r.status, r.result_json from attempts a join results r using (run_id, attempt_id)"
        for attempt, strategy, status, result in sqlite3.connect(db).execute(query):
            r = json.loads(result)
            rows.append(
                {"task": task, "attempt": attempt, "strategy": strategy, "status": status}
                | {k: r.get(k) for k in ("candidate_ms", "eager_ms", "compile_ms")}
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path, help="the batch folder")
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(a) for a in attempts(args.folder)]
    (args.out / "attempts.jsonl").write_text("\n".join(lines) + "\n")
    examples = [json.dumps(dataclasses.asdict(e)) for e in load_examples([args.folder])]
    (args.out / "ranker_examples.jsonl").write_text("\n".join(examples) + "\n")
    for name in ("batch.json", "results.jsonl", "summary.md"):
        if (args.folder / name).is_file():  # a batch stopped before its last task has no summary
            shutil.copy(args.folder / name, args.out / name)
        else:
            print(f"{name}: not in {args.folder} (a batch still to resume)")
    print(f"{len(lines)} attempts, {len(examples)} ranker examples -> {args.out}")


if __name__ == "__main__":
    main()
