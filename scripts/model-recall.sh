#!/bin/sh
# model-recall.sh: retrieval accuracy of every method against context length, on the shipped retrieval model
# models/recall (scripts/train_recall.py): runs CONFIG (default configs/model-recall.json) once per evaluation
# sequence and context length, and prints one table: per experiment, its compression ratio and the mean
# recall_acc over the sequences at each context length, then its mean attention error and lm_kl at the longest.
#
#   scripts/model-recall.sh [CONFIG] [--contexts LIST] [--sequences N] [--csv FILE]
#
#   CONFIG          a config with data.source "model" and data.answers whose data.token_ids names one of the
#                   model's evaluation sets, .../eval/C<context>.tokens.npy (default configs/model-recall.json)
#   --contexts L    comma list of context lengths, each with its set eval/C<context>.tokens.npy beside the one
#                   CONFIG names (default: the model's task.json eval_sets)
#   --sequences N   the first N sequences of each set (default: all of them)
#   --csv FILE      also write every run's rows as one CSV with the columns context and sequence first
#
# Each run is `kvc run CONFIG --no-timing --format csv -q` with data.context, data.token_ids and data.sequence
# set; the oracle's budgets (topk_attention) are scaled from CONFIG's context to each context, so that it keeps
# the same share of the tokens. The means are over the sequences; a run that fails stops the script (exit 2,
# kvc's message on stderr). Run from anywhere; KVC names the binary (default ./kvc of this checkout).
exec /usr/bin/env KVC_ROOT="$(cd -- "$(dirname -- "$0")/.." && pwd)" python3 - "$@" <<'PY'
import ast, csv, io, json, math, os, subprocess, sys

def die(msg):
    sys.stderr.write("model-recall: %s\n" % msg)
    sys.exit(2)

root = os.environ["KVC_ROOT"]
kvc = os.environ.get("KVC") or os.path.join(root, "kvc")
args = sys.argv[1:]
cfg_path, contexts, nseq, csv_out = os.path.join(root, "configs", "model-recall.json"), None, None, None
shown = "configs/model-recall.json"   # the config as the header names it
i = 0
while i < len(args):
    a = args[i]
    if a in ("--contexts", "--sequences", "--csv"):
        if i + 1 >= len(args):
            die("missing value after %s" % a)
        v = args[i + 1]
        i += 2
        if a == "--contexts":
            try:
                contexts = [int(x) for x in v.split(",")]
            except ValueError:
                die("--contexts: a comma list of integers (got %s)" % v)
            if not contexts or min(contexts) < 1:
                die("--contexts: positive integers (got %s)" % v)
        elif a == "--sequences":
            if not v.isdigit() or int(v) < 1:
                die("--sequences: a positive integer (got %s)" % v)
            nseq = int(v)
        else:
            csv_out = v
        continue
    if a in ("-h", "--help"):
        sys.stderr.write("usage: scripts/model-recall.sh [CONFIG] [--contexts LIST] [--sequences N] [--csv FILE]\n")
        sys.exit(2)
    if a.startswith("-"):
        die("unknown option %s" % a)
    cfg_path = shown = a
    i += 1

try:
    with open(cfg_path) as f:
        cfg = json.load(f)
except (OSError, ValueError) as e:
    die("%s: %s" % (cfg_path, e))
data = cfg.get("data", {})
if data.get("source") != "model" or "answers" not in data or "token_ids" not in data:
    die("%s: needs data.source \"model\", data.token_ids and data.answers" % cfg_path)
base = os.path.dirname(os.path.abspath(cfg_path))
ids = data["token_ids"]
name = os.path.basename(ids)
if not (name.startswith("C") and name.endswith(".tokens.npy") and name[1:-11].isdigit()):
    die("%s: data.token_ids must name an evaluation set C<context>.tokens.npy (got %s)" % (cfg_path, ids))
ids_dir = os.path.dirname(ids)
model_dir = os.path.join(base, data["model"])
task = {}
try:
    with open(os.path.join(model_dir, "task.json")) as f:
        task = json.load(f)
except (OSError, ValueError):
    pass
if contexts is None:
    contexts = sorted(int(c) for c in task.get("eval_sets", {})) or [int(name[1:-11])]
C0 = data["context"]

def read_shape(path):
    """(B, n) of an .npy of token ids, from its header."""
    try:
        with open(path, "rb") as f:
            head = f.read(10)
            h = f.read(int.from_bytes(head[8:10], "little")).decode("latin1")
        shape = ast.literal_eval(h)["shape"]
    except (OSError, ValueError, SyntaxError, KeyError, TypeError) as e:
        die("%s: not a readable .npy header (%s)" % (path, e))
    return shape if len(shape) == 2 else (1,) + tuple(shape)

Cmax = max(contexts)   # labels, ratio, attention error and lm_kl are taken at the longest context
oracles = [k for k, e in enumerate(cfg.get("experiments", [])) if e.get("method") == "topk_attention"]
rows_all, labels = [], []   # labels[k]: (label, method) of grid position k at the longest context
for C in contexts:
    rel = os.path.join(ids_dir, "C%d.tokens.npy" % C)
    path = os.path.join(base, rel)
    if not os.path.exists(path):
        die("%s: no evaluation set for context %d (%s)" % (cfg_path, C, path))
    B = read_shape(path)[0]
    n = B if nseq is None else nseq
    if n > B:
        die("--sequences %d: %s holds %d sequences" % (n, path, B))
    for s in range(n):
        cmd = [kvc, "run", cfg_path, "--no-timing", "--format", "csv", "-q",
               "--set", "data.token_ids=%s" % json.dumps(rel), "--set", "data.context=%d" % C,
               "--set", "data.sequence=%d" % s]
        for k in oracles:
            b = cfg["experiments"][k]["budget"]
            scaled = [max(1, b_ * C // C0) for b_ in (b if isinstance(b, list) else [b])]
            cmd += ["--set", "experiments.%d.budget=%s" % (k, json.dumps(scaled))]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr)
            die("context %d, sequence %d: kvc run exited %d" % (C, s, r.returncode))
        for k, row in enumerate(csv.DictReader(io.StringIO(r.stdout))):
            row = dict(row, context=C, sequence=s, position=k)   # the grid position: labels may name budgets
            rows_all.append(row)
            if k == len(labels):
                labels.append(None)
            labels[k] = (row["label"], row["method"]) if C == Cmax or labels[k] is None else labels[k]
        if sys.stderr.isatty():
            sys.stderr.write("\rmodel-recall: context %d, sequence %d/%d " % (C, s + 1, n))
if sys.stderr.isatty():
    sys.stderr.write("\n")

if csv_out:
    cols = ["context", "sequence"] + [c for c in rows_all[0] if c not in ("context", "sequence", "position")]
    with open(csv_out + ".tmp", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows_all)
    os.replace(csv_out + ".tmp", csv_out)

def mean(k, C, col):
    v = [float(r[col]) for r in rows_all if r["position"] == k and r["context"] == C and r[col] != ""]
    return sum(v) / len(v) if v else float("nan")

counts = {C: len({r["sequence"] for r in rows_all if r["context"] == C}) for C in contexts}
print("# %s: retrieval accuracy (recall_acc) per method against context length, mean over the evaluation sequences"
      % shown)
print("# sequences per context: %s; label, ratio, attn_error and lm_kl at context %d (the oracle's budget scales with the context)"
      % (", ".join("%d: %d" % (C, counts[C]) for C in contexts), Cmax))
head = ["label", "method", "ratio"] + ["recall@%d" % C for C in contexts] + ["attn_error", "lm_kl"]
table = []
for k, (lab, method) in enumerate(labels):
    vals = [mean(k, Cmax, "ratio")] + [mean(k, C, "recall_acc") for C in contexts] + \
           [mean(k, Cmax, "attn_error"), mean(k, Cmax, "lm_kl")]
    table.append([lab, method] + ["%.3f" % v if not math.isnan(v) else "" for v in vals])
wid = [max(len(head[k]), *(len(t[k]) for t in table)) for k in range(len(head))]
print("  ".join(h.ljust(wid[k]) if k < 2 else h.rjust(wid[k]) for k, h in enumerate(head)).rstrip())
for t in table:
    print("  ".join(x.ljust(wid[k]) if k < 2 else x.rjust(wid[k]) for k, x in enumerate(t)).rstrip())
PY
