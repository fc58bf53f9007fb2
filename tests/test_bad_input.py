#!/usr/bin/python3
"""test_bad_input.py: the bad-input catalogue, tests/bad-input/cases, run against kvc.

Every case is one wrong input (a config, a --set, a command line, a tensor file) and must give:
exit status 2 (or the case's "exit"), nothing on stdout, exactly one line on stderr of the form
"kvc: <where>: <what> (got <value>)" with the case's <where>, a <what> matching its regex and, when given,
exactly its <value>; and no output file left behind. The case format is described in
tests/bad-input/README.md. Every case runs, whatever its "needs" says. Tensor-file cases also run straight
through the reader (tensor_read, via build/tests/test_fuzz_regress --read) as "reader-<name>", and one check
("files-config-runs") runs their config, FILES_CONFIG, on good files: it must succeed.

The "--out variant": every `run` case is run a second time with "--out DIR/out.csv" appended
("<name>+out"): same status and message, and DIR must still be empty.

Run from the project root: /usr/bin/python3 tests/test_bad_input.py   (KVC=path overrides ./kvc,
KVC_TESTBIN the directory of test_fuzz_regress). Prints "PASS <name>" / "FAIL <name>: <why>" per check;
exits 1 if any check failed. Writes only inside a mktemp directory, removed at the end.
"""
import concurrent.futures
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "bad-input"))
import fixtures  # noqa: E402

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")
READER = os.path.join(os.environ.get("KVC_TESTBIN", "build/tests"), "test_fuzz_regress")
CASES = os.path.join(HERE, "bad-input", "cases")
ERR_RE = re.compile(r"^kvc: (.+): (.+) \(got (.*)\)$")
TMP = tempfile.mkdtemp(prefix="kvc-bad-input-")

# The config a tensor-file case runs (placeholders {K}, {V}, {Q}: the case's files, else good ones).
FILES_CONFIG = {
    "seed": 0,
    "data": {"source": "files", "files": {"keys": "{K}", "values": "{V}", "queries": "{Q}"}},
    "experiments": [{"method": "quantize", "bits": 4}],
}
GOOD_FILES = {"K": "npy:good-k", "V": "npy:good-v", "Q": "npy:good-q"}
# The config a model case (needs "model") starts from: the model directory {tmp}/model (the case's "model" fixture
# from fixtures.py, default "good") with t.txt, ids.npy and ids-oov.npy beside it; the case's "set" applies.
MODEL_CONFIG = {
    "data": {"source": "model", "model": "model", "text": "t.txt", "context": 16, "continuation": 4},
    "experiments": [{"method": "none"}],
}

TINY = {
    "seed": 1,
    "data": {"tokens": 16, "head_dim": 8,
             "keys": {"generator": "lowrank", "rank": 4, "scale": 0.5, "noise": 0.1},
             "values": {"generator": "normal"},
             "query": {"generator": "look_back", "token": 3, "weight": 0.5, "noise": 0.5}},
    "experiments": [{"method": "quantize", "bits": [4, 8], "axis": "token"},
                    {"method": "sink_window", "sinks": 2, "window": 6},
                    {"method": "topk_attention", "budget": 8},
                    {"method": "lowrank", "rank": 2, "apply_to": "k"}],
}


def short(s, n=300):
    s = repr(s)
    return s if len(s) <= n else s[:n] + "..."


def run(args, timeout=30):
    try:
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "", "timed out after %d s" % timeout
    except OSError as e:           # e.g. the binary is being rebuilt
        return -1, "", "cannot run %s: %s" % (args[0], e)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def load_cases():
    cases, names = [], set()
    with open(CASES, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            try:
                c = json.loads(s)
            except ValueError as e:
                raise SystemExit("%s:%d: not a JSON object: %s" % (CASES, lineno, e))
            if c.get("name") in names or not c.get("name"):
                raise SystemExit("%s:%d: missing or duplicate name %r" % (CASES, lineno, c.get("name")))
            names.add(c["name"])
            c["_line"] = lineno
            cases.append(c)
    return cases


# ---------------------------------------------------------------- building a case's input

def set_path(obj, dotted, value):
    keys = dotted.split(".")
    for k in keys[:-1]:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    last = keys[-1]
    if isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value


def del_path(obj, dotted):
    keys = dotted.split(".")
    for k in keys[:-1]:
        obj = obj[int(k)] if isinstance(obj, list) else obj[k]
    del obj[int(keys[-1]) if isinstance(obj, list) else keys[-1]]


def base_text(name):
    if name == "tiny":
        return json.dumps(TINY, indent=1) + "\n"
    with open(os.path.join("configs", name + ".json"), encoding="utf-8") as fh:
        return fh.read()


def config_text(c):
    """The config file's bytes for case c, or None when the case has no config."""
    if "config" in c:
        cfg = c["config"]
        return cfg.encode("utf-8") if isinstance(cfg, str) else (json.dumps(cfg) + "\n").encode()
    if "base" not in c:
        return None
    text = base_text(c["base"])
    if "set" in c or "del" in c:
        obj = json.loads(text)
        for path, value in c.get("set", {}).items():
            set_path(obj, path, value)
        for path in c.get("del", []):
            del_path(obj, path)
        text = json.dumps(obj, indent=1) + "\n"
    for old, new in c.get("text", []):
        if old not in text:
            raise SystemExit("%s:%d: case %s: %r is not in the base text" % (CASES, c["_line"], c["name"], old))
        text = text.replace(old, new, 1)
    data = text.encode("utf-8")
    for old, new in c.get("bytes", []):   # raw bytes (e.g. invalid UTF-8): each character of `new` is one byte
        if old.encode("utf-8") not in data:
            raise SystemExit("%s:%d: case %s: %r is not in the config" % (CASES, c["_line"], c["name"], old))
        data = data.replace(old.encode("utf-8"), new.encode("latin-1"), 1)
    return data


def position(text, c):
    """line:col (1-based, columns in bytes) named by the case's "at" (start of a substring),
    "at_after" (just after a substring) or "at": "EOF"."""
    if "at" not in c and "at_after" not in c:
        return None
    if c.get("at") == "EOF":
        off = len(text)
    elif "at" in c:
        off = text.find(c["at"].encode("utf-8"))
    else:
        off = text.find(c["at_after"].encode("utf-8"))
        off = off + len(c["at_after"].encode("utf-8")) if off >= 0 else off
    if off < 0:
        raise SystemExit("%s:%d: case %s: the \"at\" text is not in the config" % (CASES, c["_line"], c["name"]))
    line = text.count(b"\n", 0, off) + 1
    col = off - (text.rfind(b"\n", 0, off) + 1) + 1
    return "%d:%d" % (line, col)


def expand(s, subst):
    for k, v in subst.items():
        s = s.replace("{%s}" % k, v)
    return s


def prepare(c, d):
    """Writes case c's files into directory d; returns the placeholder values."""
    subst = {"tmp": d}
    files = dict(GOOD_FILES, **c.get("files", {})) if c.get("needs") == "files" or "files" in c else {}
    for key, spec in files.items():
        ext = ".safetensors" if spec.startswith("safetensors:") else ".npy"
        if "ext" in c and key in c.get("files", {}):
            ext = c["ext"]
        path = os.path.join(d, "%s-%s%s" % (c["name"], key, ext))
        if spec == "missing":      # a path with nothing there
            subst[key] = path
        elif spec == "dir":        # a directory where a file is expected
            os.mkdir(path)
            subst[key] = path
        else:
            subst[key] = fixtures.write(spec, path)
    if c.get("needs") == "model":
        fixtures.write_model(c.get("model", "good"), os.path.join(d, "model"))
    text = config_text(c)
    if text is None and c.get("needs") == "model":
        cfg = json.loads(json.dumps(MODEL_CONFIG))
        for path, value in c.get("set", {}).items():
            set_path(cfg, path, value)
        for path in c.get("del", []):
            del_path(cfg, path)
        text = (expand(json.dumps(cfg), subst) + "\n").encode()
    if text is None and c.get("needs") == "files":
        cfg = json.loads(expand(json.dumps(FILES_CONFIG), {k: v for k, v in subst.items()}))
        if "tensor" in c:          # the tensor name the reader check asks for, given in the config too
            cfg["data"]["files"]["keys"] = {"path": subst["K"], "name": c["tensor"]}
        for path, value in c.get("set", {}).items():
            set_path(cfg, path, value)
        text = (json.dumps(cfg) + "\n").encode()
    if text is not None:
        if c.get("big"):   # a config made larger than kvc's 64 MiB limit by leading whitespace
            text = b" " * (64 << 20) + text
        path = os.path.join(d, c["name"] + ".json")
        with open(path, "wb") as fh:
            fh.write(text)
        subst["cfg"] = path
        pos = position(text, c)
        if pos:
            subst["pos"] = pos
    for name, content in c.get("write", {}).items():   # extra input files (e.g. results files for kvc merge)
        os.makedirs(os.path.dirname(expand(name, subst)), exist_ok=True)   # "{tmp}/d/x" makes the directory d too
        with open(expand(name, subst), "wb") as fh:
            fh.write(expand(content, subst).encode("utf-8"))
    if c.get("untouched"):         # an existing output file a rejected run must leave alone
        with open(expand(c["untouched"], subst), "wb") as fh:
            fh.write(b"old row\n")
    return subst


# ---------------------------------------------------------------- checking

def check_stderr(c, rc, out, err, subst, rc_want):
    lines = err.split("\n")
    if rc != rc_want:
        return "exit %d, want %d (stderr %s)" % (rc, rc_want, short(err))
    if out != "":
        return "stdout not empty: %s" % short(out)
    if not err.endswith("\n") or len(lines) != 2:
        return "stderr is not exactly one line: %s" % short(err)
    line = lines[0]
    if not ERR_RE.match(line):
        return "stderr does not match 'kvc: <where>: <what> (got <value>)': %s" % short(line)
    if "where" in c:
        where = expand(c["where"], subst)
        if not line.startswith("kvc: %s: " % where):
            return "want <where> %r: %s" % (where, short(line))
        rest = line[len("kvc: %s: " % where):]
    else:
        pat = expand(c["where_re"], {k: re.escape(v) for k, v in subst.items()})
        m = re.match(r"kvc: (?:%s): " % pat, line)
        if not m:
            return "want <where> matching %r: %s" % (pat, short(line))
        rest = line[m.end():]
    what = rest.rsplit(" (got ", 1)[0]
    if "what" in c and not re.search(c["what"], what):
        return "<what> does not match %r: %s" % (c["what"], short(line))
    if "got" in c and not line.endswith("(got %s)" % expand(c["got"], subst)):
        return "want (got %s): %s" % (expand(c["got"], subst), short(line))
    return None


def run_case(c, args_extra=(), suffix=""):
    d = tempfile.mkdtemp(dir=TMP)
    subst = prepare(c, d)
    outdir = os.path.join(d, "out")
    os.mkdir(outdir)
    subst["outdir"] = outdir
    args = [expand(a, subst) for a in c.get("args", ["run", "{cfg}"])]
    extra = [expand(a, subst) for a in args_extra]
    rc, out, err = run([KVC] + args + extra)
    why = check_stderr(c, rc, out, err, subst, c.get("exit", 2))
    if why is None and os.listdir(outdir):
        why = "left files behind in the output directory: %s" % sorted(os.listdir(outdir))
    if why is None and c.get("untouched"):
        p = expand(c["untouched"], subst)
        with open(p, "rb") as fh:
            if fh.read() != b"old row\n":
                why = "%s was modified by a rejected run" % p
    return c["name"] + suffix, why


def run_reader(c):
    """A tensor-file case straight through tensor_read (exit 2 and the same message as kvc will print)."""
    d = tempfile.mkdtemp(dir=TMP)
    subst = prepare(c, d)
    key = c.get("reader", "K")
    args = [READER, "--read", subst[key]] + ([c["tensor"]] if "tensor" in c else [])
    rc, out, err = run(args)
    why = check_stderr(c, rc, out, err, subst, 2)
    return "reader-" + c["name"], why


# ---------------------------------------------------------------- the tensor-file cases' config on good files

def files_config_runs():
    """None when kvc runs FILES_CONFIG on good files (so a files case fails for its broken file alone), else why."""
    d = tempfile.mkdtemp(dir=TMP)
    subst = prepare({"name": "files-config", "needs": "files"}, d)
    rc, out, err = run([KVC, "run", subst["cfg"], "--format", "csv"])
    if rc == 0 and out:
        return None
    return "kvc run refuses the catalogue's FILES_CONFIG on good files (update it in %s): exit %d, %s" % (
        os.path.basename(__file__), rc, short(err))


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; build it with make (run from the project root)" % KVC)
        return 1
    cases = load_cases()
    report("files-config-runs", files_config_runs())
    have_reader = os.access(READER, os.X_OK)
    if not have_reader:
        report("reader-binary", "%s is missing; build it with make testbin (run from the project root)" % READER)
    ran = via_reader = 0
    jobs = []                      # (function, args), run in parallel, reported in this order
    for c in cases:
        need = c.get("needs")
        if need == "files" and have_reader and not c.get("kvc_only"):
            jobs.append((run_reader, (c,)))
            via_reader += 1
        if c.get("reader_only"):
            continue
        jobs.append((run_case, (c,)))
        ran += 1
        args = c.get("args", ["run", "{cfg}"])
        if args and args[0] == "run" and not c.get("no_out_variant"):
            jobs.append((run_case, (c, ["--out", "{outdir}/out.csv"], "+out")))
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        for name, why in pool.map(lambda job: job[0](*job[1]), jobs):
            report(name, why)
    sys.stderr.write("test_bad_input: %d cases: %d through kvc, %d through the tensor reader\n"
                     % (len(cases), ran, via_reader))
    return checks.status()


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
