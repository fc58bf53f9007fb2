#!/usr/bin/python3
"""test_model_recall.py: scripts/model-recall.sh, the retrieval table of README "A real model in the loop".

A retrieval model in the shipped model's format (scripts/train_recall.py --smoke: a few steps, its task.json and
eval/C{128,256}.tokens.npy) is scored by the script over two sequences of both evaluation sets. Checks:
  * the table: a header with recall@128 and recall@256, one line per grid position, labelled as at the longest
    context; each number is the mean, computed here with numpy from the --csv rows, of that position's column;
  * the oracle's budgets are scaled to each context (bytes of the top-k rows at 128 = half those at 256);
  * the runs really differ per sequence and context: the CSV's lm_nll of `none` is not one value, and the row of
    (context 128, sequence 1) equals a direct `kvc run` with those --set values;
  * bad input: a config without data.answers, a context without an evaluation set, more sequences than a set
    holds and an unknown option each exit 2 with one line.
Skipped (no lines) when torch is not installed (the model is trained here).
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import checks

try:
    import torch  # noqa: F401
except ImportError:
    print("test_model_recall.py: python3-torch is not installed; skipped", file=sys.stderr)
    sys.exit(0)

KVC = os.environ.get("KVC", "./kvc")
SCRIPT = "scripts/model-recall.sh"


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, env=dict(os.environ, KVC=KVC))


def main():
    tmp = tempfile.mkdtemp(prefix="kvc-recall-")
    try:
        r = run("/usr/bin/python3", "scripts/train_recall.py", "--smoke", "--threads", "1",
                "--out", os.path.join(tmp, "recall"))
        if r.returncode != 0:
            checks.report("model-recall-train", "train_recall.py --smoke: exit %d: %s" % (r.returncode, r.stderr))
            return checks.status()
        cfg = {"seed": 1, "data": {"source": "model", "model": "recall", "token_ids": "recall/eval/C256.tokens.npy",
                                   "sequence": 0, "context": 256, "continuation": 16,
                                   "answers": {"start": 2, "step": 2}},
               "experiments": [{"method": "none"},
                               {"label": "oracle {budget}", "method": "topk_attention", "budget": [128, 64]},
                               {"label": "INT4", "method": "quantize", "bits": 4},
                               {"label": "window {keep_ratio}", "method": "window", "keep_ratio": [0.5, 0.25]}]}
        path = os.path.join(tmp, "r.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        out_csv = os.path.join(tmp, "all.csv")
        r = run("sh", SCRIPT, path, "--sequences", "2", "--csv", out_csv)
        if r.returncode != 0:
            checks.report("model-recall-run", "exit %d: %s" % (r.returncode, r.stderr))
            return checks.status()
        lines = [ln for ln in r.stdout.splitlines() if not ln.startswith("#")]
        head = lines[0].split()
        with open(out_csv) as f:
            rows = list(csv.DictReader(f))
        npos = 6
        ok = head[:3] == ["label", "method", "ratio"] and "recall@128" in head and "recall@256" in head and \
            len(lines) == 1 + npos and len(rows) == 2 * 2 * npos
        checks.report("model-recall-table-shape", None if ok else "header %s, %d lines, %d csv rows" %
                      (head, len(lines), len(rows)))

        # every number against numpy over the CSV: grid position k is row k of each run
        def col(C, k, name):
            runs = [rr for rr in rows if int(rr["context"]) == C]
            return np.mean([float(runs[i * npos + k][name]) for i in range(len(runs) // npos)])
        bad = []
        for k in range(npos):
            cells = lines[1 + k].rsplit(None, 6)
            label_at_256 = [rr for rr in rows if int(rr["context"]) == 256][k]["label"]
            want = [col(256, k, "ratio"), col(128, k, "recall_acc"), col(256, k, "recall_acc"),
                    col(256, k, "attn_error"), col(256, k, "lm_kl")]
            got = [float(x) for x in cells[2:]]
            if not cells[0].startswith(label_at_256) or any(abs(g - w) > 5e-4 + 1e-12 for g, w in zip(got, want)):
                bad.append((lines[1 + k], label_at_256, ["%.4f" % w for w in want]))
        checks.report("model-recall-means", None if not bad else "table vs numpy: %s" % bad)

        by = {(int(rr["context"]), rr["label"]): int(rr["bytes"]) for rr in rows if rr["method"] == "topk_attention"}
        ok = by.get((256, "oracle 128")) == 2 * by.get((128, "oracle 64"), -1) and \
            by.get((256, "oracle 64")) == 2 * by.get((128, "oracle 32"), -1)
        checks.report("model-recall-oracle-scaled", None if ok else "top-k bytes %s" % by)

        nll = {rr["lm_nll"] for rr in rows if rr["method"] == "none"}
        direct = run(KVC, "run", path, "--no-timing", "--format", "csv", "-q", "--set",
                     'data.token_ids="recall/eval/C128.tokens.npy"', "--set", "data.context=128", "--set",
                     "data.sequence=1", "--set", "experiments.1.budget=[64, 32]")
        drows = list(csv.DictReader(direct.stdout.splitlines()))
        mine = [rr for rr in rows if rr["context"] == "128" and rr["sequence"] == "1"]
        same = direct.returncode == 0 and len(drows) == len(mine) and all(
            a["recall_acc"] == b["recall_acc"] and a["lm_nll"] == b["lm_nll"] and a["bytes"] == b["bytes"]
            for a, b in zip(drows, mine))
        checks.report("model-recall-per-run", None if len(nll) == 4 and same else
                      "none's lm_nll over the 4 runs: %s; direct run equal: %s" % (nll, same))

        noans = dict(cfg, data={k: v for k, v in cfg["data"].items() if k != "answers"})
        p2 = os.path.join(tmp, "noans.json")
        with open(p2, "w") as f:
            json.dump(noans, f)
        for name, args in (("no-answers", [p2]), ("no-set", [path, "--contexts", "300"]),
                           ("too-many", [path, "--sequences", "99"]), ("option", [path, "--bogus"])):
            r = run("sh", SCRIPT, *args)
            err = r.stderr.strip().splitlines()
            checks.report("model-recall-bad-" + name, None if r.returncode == 2 and len(err) == 1 and
                          err[0].startswith("model-recall: ") and r.stdout == "" else
                          "exit %d, stderr %r" % (r.returncode, r.stderr))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
