#!/usr/bin/python3
"""test_cli.py: black-box golden tests of kvc's command line (in the style of zstd's cli-tests).

Each case runs ./kvc and checks the exact exit status, stdout (empty for every error) and stderr.
An error must be exactly one line, "kvc: <where>: <what> (got <value>)"; the cases check <where>
(file name and JSON path, or file:LINE:COL for malformed JSON), key words of <what> and the got value.

Run from the project root: /usr/bin/python3 tests/test_cli.py   (KVC=path overrides ./kvc)
Prints "PASS <name>" / "FAIL <name>: <why>" per check; exits 1 if any check failed.
Writes only inside a mktemp directory, removed at the end. Standard library only.
"""
import copy
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import checks  # tests/checks.py: PASS/FAIL lines
from checks import report

KVC = os.environ.get("KVC", "./kvc")
LESSON = "configs/lesson.json"
PRACTICE = "configs/practice.json"
ERR_RE = re.compile(r"^kvc: (.+): (.+) \(got (.*)\)$")

TMP = tempfile.mkdtemp(prefix="kvc-test-cli-")


def run(args, stdout_path=None):
    """Runs kvc; returns (rc, stdout, stderr) as text."""
    try:
        if stdout_path:
            with open(stdout_path, "wb") as fh:
                p = subprocess.run([KVC] + args, stdout=fh, stderr=subprocess.PIPE, timeout=20)
            return p.returncode, "", p.stderr.decode("utf-8", "replace")
        p = subprocess.run([KVC] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    except subprocess.TimeoutExpired:
        return -1, "", "timed out"
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def write(name, content):
    """Writes a file in the temp dir (str -> utf-8, bytes as is, dict/list -> JSON); returns its path."""
    path = os.path.join(TMP, name)
    if isinstance(content, (dict, list)):
        content = json.dumps(content, indent=2) + "\n"
    if isinstance(content, str):
        content = content.encode("utf-8")
    with open(path, "wb") as fh:
        fh.write(content)
    return path


def load(path):
    with open(path) as fh:
        return json.load(fh)


def short(s, n=300):
    s = repr(s)
    return s if len(s) <= n else s[:n] + "..."


def ok_case(name, args, stdout_has=(), stdout_re=None):
    """Exit 0, non-empty stdout, empty stderr."""
    rc, out, err = run(args)
    why = None
    if rc != 0:
        why = "exit %d, want 0 (stderr %s)" % (rc, short(err))
    elif err != "":
        why = "stderr not empty: %s" % short(err)
    elif out == "":
        why = "stdout is empty"
    elif stdout_re and not re.search(stdout_re, out):
        why = "stdout does not match %r: %s" % (stdout_re, short(out))
    else:
        for s in stdout_has:
            if s not in out:
                why = "stdout lacks %r: %s" % (s, short(out))
                break
    report(name, why)
    return out


def err_case(name, args, where, what=(), got=None, rc_want=2):
    """Exit rc_want, empty stdout, stderr exactly one line "kvc: WHERE: WHAT (got GOT)".
    where: exact <where> (the text between "kvc: " and the next ": " that the message continues with);
    what: substrings the message must contain; got: exact <value> inside "(got ...)", or None to skip."""
    rc, out, err = run(args)
    why = None
    lines = err.split("\n")
    if rc != rc_want:
        why = "exit %d, want %d (stderr %s)" % (rc, rc_want, short(err))
    elif out != "":
        why = "stdout not empty: %s" % short(out)
    elif not err.endswith("\n") or len(lines) != 2:
        why = "stderr is not exactly one line: %s" % short(err)
    else:
        line = lines[0]
        m = ERR_RE.match(line)
        if not m:
            why = "stderr does not match 'kvc: <where>: <what> (got <value>)': %s" % short(line)
        elif not line.startswith("kvc: %s: " % where):
            why = "want <where> %r: %s" % (where, short(line))
        elif got is not None and not line.endswith("(got %s)" % got):
            why = "want (got %s): %s" % (got, short(line))
        else:
            for s in what:
                if s not in line:
                    why = "message lacks %r: %s" % (s, short(line))
                    break
    report(name, why)


def csv_rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def main():
    if not os.access(KVC, os.X_OK):
        report("kvc-binary", "%s is missing; build it with make (run from the project root)" % KVC)
        return 1
    lesson = load(LESSON)
    practice = load(PRACTICE)

    # ------------------------------------------------------------------ help, version, usage
    main_help = r"^kvc \d+\.\d+\.\d+: a laboratory for KV-cache compression\n"
    for args in (["--help"], ["-h"], ["help"]):
        ok_case("help-main[%s]" % " ".join(args), args, ("usage: kvc COMMAND", "run", "size", "methods"),
                stdout_re=main_help)
    run_usage = r"^usage: kvc run CONFIG\.json"
    for args in (["help", "run"], ["run", "--help"], ["run", "-h"], ["run", LESSON, "--help"]):
        ok_case("help-run[%s]" % " ".join(args), args, ("--set PATH=JSON", "--format"), stdout_re=run_usage)
    for args in (["help", "size"], ["size", "--help"], ["size", "-h"], ["size", "--head-dim", "x", "--help"]):
        ok_case("help-size[%s]" % " ".join(args), args, ("--head-dim D", "--k-bits"),
                stdout_re=r"^usage: kvc size \(--head-dim D \| --model NAME\)")
    for args in (["help", "methods"], ["methods", "--help"], ["help", "help"]):
        ok_case("help-cmd[%s]" % " ".join(args), args, stdout_re=r"^usage: kvc (methods|help)")
    # -h/--help is answered once for every command (src/cli/main.c): kvc CMD --help is kvc help CMD, byte for
    # byte, wherever an option may stand; a word taken as an option's value is that value
    for cmd in ("run", "size", "methods", "bench", "merge", "synth", "stats", "help"):
        _, want, _ = run(["help", cmd])
        bad = []
        for args in ([cmd, "--help"], [cmd, "-h"], [cmd, "x", "--help"], [cmd, "--format", "table", "-h"]):
            rc, out, err = run(args)
            if rc != 0 or err or out != want:
                bad.append("%s: exit %d stdout %s stderr %s" % (" ".join(args), rc, short(out, 80), short(err)))
        report("help-same-text[%s]" % cmd, "; ".join(bad) if bad else None)
    err_case("help-after-double-dash", ["merge", "--", "-h"], "-h", ("cannot open",), None)
    err_case("help-word-as-value", ["run", "--set", "-h", PRACTICE], "--set -h", ("expected PATH=JSON",), '"-h"')

    out = ok_case("methods", ["methods"], ("bits", "axis", "apply_to", "sinks", "window", "budget", "rank"))
    names = [ln for ln in out.split("\n") if ln and not ln.startswith(" ")]
    names = [ln.split()[0] for ln in names]
    report("methods-names", None if names == ["quantize", "kivi", "cast", "ggml", "sink_window", "topk_attention",
                                              "lowrank", "window", "h2o", "snapkv", "tova", "knorm", "random",
                                              "share_heads", "pipeline", "none"]
           else "method list %r" % names)

    # --version: "kvc VERSION" alone on the first line, then commit, compiler, flags, BLAS build, decode kernels
    for flag in ("--version", "-V"):
        rc, out, err = run([flag])
        m = re.match(r"^kvc (\d+\.\d+\.\d+)\ncommit:   \S+\ncompiler: .+\nflags:    .+\nblas:     .+ \(core .+\)\n"
                     r"kernels:  (avx512|avx2|scalar) .*\n$", out)
        why = None
        if rc != 0 or err or not m:
            why = "exit %d stdout %s stderr %s" % (rc, short(out), short(err))
        else:
            _, hout, _ = run(["--help"])
            if not hout.startswith("kvc %s:" % m.group(1)):
                why = "--help names another version: %s" % short(hout.split("\n")[0])
        report("version[%s]" % flag, why)

    rc, out, err = run([])
    report("no-args", None if rc == 2 and out == "" and "usage: kvc COMMAND" in err
           else "exit %d stdout %s stderr %s" % (rc, short(out), short(err)))

    if not os.path.exists("/dev/full"):
        for name in ("stdout-write-error", "stdout-write-error-run"):
            checks.skip(name, "no /dev/full on this machine")
    else:
        rc, _, err = run(["--help"], stdout_path="/dev/full")
        report("stdout-write-error", None if rc == 1 and re.match(r"^kvc: stdout: write error \(got .+\)\n$", err)
               else "exit %d stderr %s (want 1 and one write-error line)" % (rc, short(err)))
        p = write("full-test.json", practice)
        rc, _, err = run(["run", p], stdout_path="/dev/full")
        report("stdout-write-error-run", None if rc == 1 and err.count("\n") == 1 and "write error" in err
               else "exit %d stderr %s" % (rc, short(err)))

    # ------------------------------------------------------------------ malformed JSON
    def bad_json(name, text, line, col, what, got):
        p = write(name + ".json", text)
        err_case("json-" + name, ["run", p], "%s:%d:%d" % (p, line, col), ("malformed JSON",) + tuple(what), got)

    bad_json("missing-comma", '{\n  "seed": 3\n  "data": {}\n}\n', 3, 3, ("here",), '""data": {}"')
    txt = open(PRACTICE).read()
    i = txt.index('{"channel": 11')
    broken = txt[:i - 2] + txt[i - 1:]   # drop the comma between the two outliers
    ln = broken[:i - 1].count("\n") + 1
    cl = (i - 1) - broken.rfind("\n", 0, i - 1)
    bad_json("missing-comma-in-list", broken, ln, cl, ("here",), None)
    bad_json("trailing-garbage", '{"seed": 1}  x\n', 1, 14, ("after the end of the document",), '"x"')
    bad_json("trailing-garbage-lines", '{"seed": 1}\n\n  ]\n', 3, 3, ("after the end of the document",), '"]"')
    bad_json("trailing-second-doc", txt + "\n{}\n", txt.count("\n") + 2, 1, ("after the end",), '"{}"')
    bad_json("empty-file", "", 1, 1, ("unexpected end of file",), "end of file")
    bad_json("whitespace-only", "  \n\n", 3, 1, ("unexpected end of file",), "end of file")
    bad_json("nul-byte", b'{"seed":\n 1\x00}', 2, 3, ("NUL byte",), "byte 0x00")
    bad_json("bad-literal", '{"seed": tru}', 1, 10, ("here",), '"tru}"')
    bad_json("unquoted-key", '{\n  seed: 1}', 2, 3, ("here",), '"seed: 1}"')
    bad_json("single-quotes", "{'seed': 1}", 1, 2, ("here",), None)
    bad_json("trailing-comma", '{"seed": 1,\n}', 2, 1, ("here",), '"}"')
    bad_json("leading-zero", '{"seed": 01}', 1, 11, ("here",), '"1}"')
    bad_json("bare-dot", '{"seed": 1.}', 1, 12, ("here",), '"}"')
    bad_json("bad-escape", '{"seed": "1\\q"}', 1, 12, ("here",), None)
    bad_json("control-char-in-string", '{"seed": "1\t2"}', 1, 12, ("here",), None)
    bad_json("unterminated-string", '{"seed": "12', 1, 13, ("unexpected end of file",), "end of file")
    bad_json("crlf-missing-comma", '{\r\n"seed": 1\r\n"data": {}}', 3, 1, ("here",), None)
    bad_json("too-deep", '{"seed": ' + "[" * 1001 + "]" * 1001 + "}", 1, 1009, ("nested deeper",), None)

    p = write("bom.json", b"\xef\xbb\xbf" + txt.encode())
    rc, out, err = run(["run", p, "--format", "csv"])
    report("json-utf8-bom-accepted", None if rc == 0 and err == "" and len(csv_rows(out)) == 2
           else "exit %d stderr %s" % (rc, short(err)))

    # every proper prefix of practice.json is a truncated file: EOF at its end, with the right line:col
    bad = []
    for n in range(1, len(txt.rstrip())):
        if not txt[:n].strip():
            continue
        p = write("truncated.json", txt[:n])
        rc, out, err = run(["run", p])
        line = txt[:n].count("\n") + 1
        col = n - (txt.rfind("\n", 0, n) + 1) + 1
        want = "kvc: %s:%d:%d: malformed JSON: unexpected end of file (got end of file)\n" % (p, line, col)
        if rc != 2 or out or err != want:
            bad.append("%d bytes: exit %d stderr %s" % (n, rc, short(err, 120)))
            if len(bad) >= 3:
                break
    report("json-truncated-every-prefix", "; ".join(bad) if bad else None)

    # ------------------------------------------------------------------ wrong types and ranges
    def bad_cfg(name, cfg, where, what=(), got=None):
        p = write(name + ".json", cfg)
        err_case("config-" + name, ["run", p], "%s: %s" % (p, where), what, got)

    def mod(base, fn):
        c = copy.deepcopy(base)
        fn(c)
        return c

    bad_cfg("tokens-string", mod(practice, lambda c: c["data"].update(tokens="200")), "data.tokens",
            ("must be an integer",), '"200"')
    bad_cfg("bits-fraction", mod(practice, lambda c: c["experiments"][0].update(bits=4.5)),
            "experiments.0.bits", ("must be an integer in 2..8",), "4.5")
    bad_cfg("bits-in-list-fraction", mod(practice, lambda c: c["experiments"][0].update(bits=[4, 4.5])),
            "experiments.0.bits.1", ("must be an integer in 2..8",), "4.5")
    bad_cfg("bits-bool", mod(practice, lambda c: c["experiments"][0].update(bits=True)),
            "experiments.0.bits", ("must be an integer",), "true")
    bad_cfg("seed-negative", mod(practice, lambda c: c.update(seed=-1)), "seed", ("2^53",), "-1")
    bad_cfg("seed-string-junk", mod(practice, lambda c: c.update(seed="12x")), "seed",
            ("non-negative decimal integer",), '"12x"')
    bad_cfg("seed-empty-string", mod(practice, lambda c: c.update(seed="")), "seed", (), '""')
    bad_cfg("seed-fraction", mod(practice, lambda c: c.update(seed=1.5)), "seed", (), "1.5")
    bad_cfg("seed-null", mod(practice, lambda c: c.update(seed=None)), "seed", (), "null")
    # 2^53 + 2 written as a JSON number: beyond exact doubles; the message shows the exact value
    bad_cfg("seed-2^53+2-number", txt.replace('"seed": 3', '"seed": 9007199254740994'), "seed",
            ("decimal string for larger seeds",), "9007199254740994")
    # 2^53 + 1 reads as the double 2^53: it must be refused, not silently run as another seed
    bad_cfg("seed-2^53+1-number", txt.replace('"seed": 3', '"seed": 9007199254740993'), "seed", ("2^53",))
    for name, seed in (("seed-2^53-1-number", "9007199254740991"), ("seed-2^53+1-string", '"9007199254740993"'),
                       ("seed-huge-string", '"123456789012345678901234567890"')):
        p = write(name + ".json", txt.replace('"seed": 3', '"seed": %s' % seed))
        rc, out, err = run(["run", p, "--format", "csv"])
        report("config-" + name + "-accepted", None if rc == 0 and err == "" and len(csv_rows(out)) == 2
               else "exit %d stderr %s" % (rc, short(err)))

    bad_cfg("bits-1", mod(practice, lambda c: c["experiments"][0].update(bits=1)), "experiments.0.bits",
            ("must be in 2..8",), "1")
    bad_cfg("bits-9", mod(practice, lambda c: c["experiments"][0].update(bits=9)), "experiments.0.bits",
            ("must be in 2..8",), "9")
    bad_cfg("axis-typo", mod(practice, lambda c: c["experiments"][0].update(axis=["token", "chanel"])),
            "experiments.0.axis.1", ('did you mean "channel"',), '"chanel"')
    bad_cfg("rank-gt-head-dim", mod(lesson, lambda c: c["experiments"][3].update(rank=[65, 16])),
            "experiments.3.rank.0", ("rank must be in 1..min(tokens, head_dim) = 64",), "65")
    bad_cfg("rank-gt-tokens", mod(lesson, lambda c: (c["data"].update(tokens=20, query={
        "generator": "look_back", "token": 10}), c["experiments"][1].update(window=10),
        c["experiments"][2].update(budget=10), c["experiments"][3].update(rank=[8, 32]))),
        "experiments.3.rank.1", ("= 20",), "32")
    bad_cfg("budget-gt-tokens", mod(lesson, lambda c: c["experiments"][2].update(budget=513)),
            "experiments.2.budget", ("budget must be in 1..tokens = 512",), "513")
    bad_cfg("budget-0", mod(lesson, lambda c: c["experiments"][2].update(budget=0)),
            "experiments.2.budget", (), "0")
    bad_cfg("sinks-window-gt-tokens", mod(lesson, lambda c: c["experiments"][1].update(window=509)),
            "experiments.1.window", ("must not exceed tokens = 512",), "4 + 509")
    bad_cfg("sinks-window-zero", mod(lesson, lambda c: c["experiments"][1].update(sinks=0, window=0)),
            "experiments.1.window", ("at least one token",), "0 + 0")
    bad_cfg("query-token-ge-tokens", mod(lesson, lambda c: c["data"]["query"].update(token=512)),
            "data.query.token", ("0..511",), "512")
    bad_cfg("outlier-channel-ge-head-dim",
            mod(practice, lambda c: c["data"]["keys"]["outliers"][1].update(channel=16)),
            "data.keys.outliers.1.channel", ("0..15",), "16")
    bad_cfg("outlier-channel-duplicate",
            mod(practice, lambda c: c["data"]["keys"]["outliers"][1].update(channel=5)),
            "data.keys.outliers.1.channel", ("already listed at data.keys.outliers.0",), "5")
    bad_cfg("outlier-missing-scale",
            mod(practice, lambda c: c["data"]["keys"]["outliers"][0].pop("scale")),
            "data.keys.outliers.0.scale", ("missing required",), "nothing")
    bad_cfg("unknown-method", mod(practice, lambda c: c["experiments"][0].update(method="quantise")),
            "experiments.0.method", ('unknown method; did you mean "quantize"?',), '"quantise"')
    bad_cfg("unknown-method-2", mod(lesson, lambda c: c["experiments"][1].update(method="sink_windows")),
            "experiments.1.method", ('did you mean "sink_window"?',), '"sink_windows"')
    bad_cfg("unknown-key-top", mod(practice, lambda c: c.update(experiment=c.pop("experiments"))),
            "experiment", ('unknown key; did you mean "experiments"?',), '"experiment"')
    bad_cfg("unknown-key-top-2", mod(practice, lambda c: c.update(sed=1)),
            "sed", ('did you mean "seed"?',), '"sed"')
    bad_cfg("unknown-key-data", mod(practice, lambda c: c["data"].update(head_dims=16)),
            "data.head_dims", ('unknown key; did you mean "head_dim"?',), '"head_dims"')
    bad_cfg("unknown-key-keys", mod(practice, lambda c: c["data"]["keys"].update(outlier=[])),
            "data.keys.outlier", ('did you mean "outliers"?',), '"outlier"')
    bad_cfg("unknown-key-experiment", mod(practice, lambda c: c["experiments"][0].update(bitz=4)),
            "experiments.0.bitz", ('unknown key; did you mean "bits"?',), '"bitz"')
    bad_cfg("unknown-key-experiment-2", mod(lesson, lambda c: c["experiments"][3].update(rnak=4)),
            "experiments.3.rnak", ('did you mean "rank"?',), '"rnak"')
    bad_cfg("param-of-other-method", mod(lesson, lambda c: c["experiments"][1].update(bits=4)),
            "experiments.1.bits", ("unknown key",), '"bits"')
    bad_cfg("duplicate-key", txt.replace('"tokens": 200,', '"tokens": 200, "tokens": 20,'),
            "data.tokens", ("key appears twice",), "20")
    bad_cfg("duplicate-key-experiment", txt.replace('"bits": 4,', '"bits": 4, "bits": 8,'),
            "experiments.0.bits", ("key appears twice",), "8")
    bad_cfg("missing-experiments", mod(practice, lambda c: c.pop("experiments")), "experiments",
            ("missing required",), "nothing")
    bad_cfg("empty-experiments", mod(practice, lambda c: c.update(experiments=[])), "experiments",
            ("empty",), "[]")
    bad_cfg("experiments-not-list", mod(practice, lambda c: c.update(experiments={})), "experiments",
            ("must be a list",), "{}")
    bad_cfg("missing-data", mod(practice, lambda c: c.pop("data")), "data", ("missing required",), "nothing")
    bad_cfg("missing-tokens", mod(practice, lambda c: c["data"].pop("tokens")), "data.tokens",
            ("missing required",), "nothing")
    bad_cfg("missing-method", mod(practice, lambda c: c["experiments"][0].pop("method")),
            "experiments.0.method", ("missing required",), "nothing")
    bad_cfg("missing-window", mod(lesson, lambda c: c["experiments"][1].pop("window")),
            "experiments.1.window", ("missing required parameter of sink_window",), "nothing")
    bad_cfg("missing-rank", mod(lesson, lambda c: c["experiments"][3].pop("rank")),
            "experiments.3.rank", ("missing required parameter of lowrank",), "nothing")
    bad_cfg("empty-param-list", mod(practice, lambda c: c["experiments"][0].update(bits=[])),
            "experiments.0.bits", ("must not be empty",), "[]")
    bad_cfg("topk-without-query", mod(lesson, lambda c: c["data"].pop("query")),
            "experiments.2.method", ("add data.query",), '"topk_attention"')
    bad_cfg("query-without-values", mod(lesson, lambda c: c["data"].pop("values")),
            "data.query", ("needs data.values",))
    bad_cfg("apply-to-kv-without-values", mod(practice, lambda c: c["experiments"][0].update(apply_to="kv")),
            "experiments.0.apply_to", ("add data.values",), '"kv"')
    bad_cfg("apply-to-default-without-values", mod(practice, lambda c: c["experiments"][0].pop("apply_to")),
            "experiments.0.apply_to (default)", ("add data.values",), '"kv"')
    bad_cfg("label-unknown-placeholder",
            mod(practice, lambda c: c["experiments"][0].update(label="INT{bts} keys")),
            "experiments.0.label", ("unknown placeholder {bts}", "{bits}"), '"INT{bts} keys"')
    bad_cfg("label-not-string", mod(practice, lambda c: c["experiments"][0].update(label=5)),
            "experiments.0.label", ("must be a string",), "5")
    bad_cfg("top-level-array", [practice], "(top level)", ("must be a JSON object",))
    bad_cfg("keys-generator-typo", mod(practice, lambda c: c["data"]["keys"].update(generator="norml")),
            "data.keys.generator", ('did you mean "normal"?',), '"norml"')
    missing = os.path.join(TMP, "no-such-config.json")
    err_case("config-missing-file", ["run", missing], missing, ("cannot open the config",))
    err_case("config-is-a-directory", ["run", TMP], TMP, ())

    # ------------------------------------------------------------------ --set (outputs compared whole: no timing)
    rc, base, err = run(["run", PRACTICE, "--format", "csv", "--no-timing"])
    report("run-practice-csv", None if rc == 0 and err == "" and len(csv_rows(base)) == 2
           else "exit %d stderr %s" % (rc, short(err)))
    rc, out, err = run(["run", PRACTICE, "--set", "data.tokens=20", "--format", "csv", "--no-timing"])
    rows = csv_rows(out) if rc == 0 else []
    report("set-tokens", None if rc == 0 and err == "" and out != base and
           [r["baseline_bytes"] for r in rows] == ["640", "640"]
           else "exit %d stderr %s stdout %s" % (rc, short(err), short(out)))
    rc, out2, err = run(["run", PRACTICE, "--set=data.tokens=20", "--format=csv", "--no-timing"])
    report("set-equals-form", None if rc == 0 and out2 == out else "exit %d: %s" % (rc, short(err)))
    rc, out3, err = run(["run", PRACTICE, "--set", "data.tokens=20", "--set", "data.tokens=200", "--format", "csv", "--no-timing"])
    report("set-applied-in-order", None if rc == 0 and out3 == base else "exit %d: %s" % (rc, short(err)))
    rc, out, err = run(["run", PRACTICE, "--set", 'experiments.0.axis="channel"', "--format", "csv", "--no-timing"])
    rows = csv_rows(out) if rc == 0 else []
    report("set-axis-string", None if rc == 0 and err == "" and
           [r["label"] for r in rows] == ["INT4 keys, per-channel scales"]
           else "exit %d stderr %s rows %r" % (rc, short(err), rows))
    rc, out, err = run(["run", PRACTICE, "--set", "experiments.0.bits=[4,8]", "--format", "csv", "--no-timing"])
    report("set-list", None if rc == 0 and len(csv_rows(out)) == 4 else "exit %d: %s" % (rc, short(err)))
    rc, out, err = run(["run", PRACTICE, "--set", "seed=3", "--format", "csv", "--no-timing"])
    report("set-same-value", None if rc == 0 and out == base else "exit %d: %s" % (rc, short(err)))

    err_case("set-missing-path", ["run", PRACTICE, "--set", "data.tokenz.x=1"], "--set data.tokenz.x=1",
             ('no key "tokenz" here; did you mean "tokens"?',), '"tokenz"')
    err_case("set-missing-path-experiment", ["run", PRACTICE, "--set", "experiments.0.bitz.0=1"],
             "--set experiments.0.bitz.0=1", ('did you mean "bits"?',), '"bitz"')
    err_case("set-new-unknown-key", ["run", PRACTICE, "--set", "data.tokenz=20"],
             "--set data.tokenz=20: data.tokenz", ('did you mean "tokens"?',), '"tokenz"')
    err_case("set-bad-json", ["run", PRACTICE, "--set", "experiments.0.axis=channel"],
             "--set experiments.0.axis=channel", ("not valid JSON", "strings need quotes"), "channel")
    err_case("set-json-trailing-garbage", ["run", PRACTICE, "--set", "data.tokens=20x"],
             "--set data.tokens=20x", ("not valid JSON",), "20x")
    err_case("set-json-two-values", ["run", PRACTICE, "--set", "data.tokens=20 30"],
             "--set data.tokens=20 30", ("not valid JSON",), "20 30")
    err_case("set-json-empty", ["run", PRACTICE, "--set", "data.tokens="], "--set data.tokens=",
             ("not valid JSON",), "")
    err_case("set-index-out-of-range", ["run", PRACTICE, "--set", "experiments.1.bits=8"],
             "--set experiments.1.bits=8", ("not an index of a list of 1",), '"1"')
    err_case("set-index-not-number", ["run", PRACTICE, "--set", "data.keys.outliers.x.scale=1"],
             "--set data.keys.outliers.x.scale=1", ("not an index of a list of 2",), '"x"')
    err_case("set-descend-scalar", ["run", PRACTICE, "--set", "data.tokens.x=1"], "--set data.tokens.x=1",
             ("cannot descend",), '"x"')
    err_case("set-empty-component", ["run", PRACTICE, "--set", "data..tokens=1"], "--set data..tokens=1",
             ("empty component",), '"data..tokens"')
    err_case("set-without-equals", ["run", PRACTICE, "--set", "data.tokens"], "--set data.tokens",
             ("expected PATH=JSON",), '"data.tokens"')
    err_case("set-without-path", ["run", PRACTICE, "--set", "=5"], "--set =5", ("expected PATH=JSON",), '"=5"')
    err_case("set-without-value", ["run", PRACTICE, "--set"], "run", ("missing value after --set",), "nothing")
    err_case("set-value-out-of-range", ["run", PRACTICE, "--set", "experiments.0.bits=9"],
             "%s: experiments.0.bits" % PRACTICE, ("2..8",), "9")
    err_case("set-seed-2^53+2", ["run", PRACTICE, "--set", "seed=9007199254740994"], "%s: seed" % PRACTICE,
             (), "9007199254740994")

    # ------------------------------------------------------------------ run options, commands
    err_case("run-unknown-option", ["run", PRACTICE, "--frobnicate"], "run", ("unknown option",),
             '"--frobnicate"')
    err_case("run-near-option", ["run", PRACTICE, "--tread", "2"], "run",
             ('unknown option; did you mean "--threads"? see kvc run --help',), '"--tread"')
    err_case("run-near-option-equals", ["run", PRACTICE, "--timing-repat=3"], "run",
             ('did you mean "--timing-repeat"?',), '"--timing-repat=3"')
    err_case("run-flag-with-value", ["run", PRACTICE, "--list=yes"], "run: --list", ("takes no value",), '"yes"')
    err_case("run-threads-word", ["run", PRACTICE, "--threads", "two"], "run: --threads",
             ("must be an integer in 1..1024",), '"two"')
    rc, out, err = run(["run", "--no-timing", "--format", "csv", "--", PRACTICE])
    report("run-double-dash", None if rc == 0 and err == "" and len(csv_rows(out)) == 2
           else "exit %d stderr %s" % (rc, short(err)))
    err_case("run-format-xml", ["run", PRACTICE, "--format", "xml"], "run: --format",
             ("table, csv or jsonl",), '"xml"')
    err_case("run-format-missing", ["run", PRACTICE, "--format"], "run", ("missing value after --format",),
             "nothing")
    err_case("run-two-configs", ["run", PRACTICE, LESSON], "run", ("only one config file",),
             '"%s" after "%s"' % (LESSON, PRACTICE))
    err_case("run-no-config", ["run"], "run", ("missing the config file",), "nothing")
    err_case("run-no-config-only-options", ["run", "--format", "csv"], "run", ("missing the config file",),
             "nothing")
    err_case("help-unknown-command", ["help", "rn"], "help", ("unknown command",), '"rn"')
    err_case("methods-unknown-name", ["methods", "quantise"], "methods", ('unknown method; did you mean "quantize"?',),
             '"quantise"')
    err_case("methods-two-names", ["methods", "kivi", "h2o"], "methods", ("one method name at most",),
             '"h2o" after "kivi"')
    err_case("methods-format-xml", ["methods", "--format", "xml"], "methods: --format", ("text, json or jsonl",),
             '"xml"')
    # the top-level unknown-command message has no <where>; check it the same way otherwise
    for name, word, near in (("unknown-command", "rn", "run"), ("unknown-command-2", "sizes", "size"),
                             ("unknown-command-3", "method", "methods")):
        rc, out, err = run([word, PRACTICE])
        ok = (rc == 2 and out == "" and err.count("\n") == 1 and
              re.match(r'^kvc: unknown command; did you mean "%s"\? see kvc --help \(got "%s"\)\n$' % (near, word),
                       err))
        report(name, None if ok else "exit %d stdout %s stderr %s" % (rc, short(out), short(err)))

    # ------------------------------------------------------------------ kvc size: bad flags
    size_bad = [
        ("size-no-head-dim", [], "size", ("--head-dim or --model is required",), "nothing"),
        ("size-no-head-dim-other-flags", ["--layers", "2"], "size", ("--head-dim or --model is required",), "nothing"),
        ("size-head-dim-no-value", ["--head-dim"], "size", ("missing value after --head-dim",), "nothing"),
        ("size-head-dim-word", ["--head-dim", "abc"], "size: --head-dim", ("1..65536",), '"abc"'),
        ("size-head-dim-negative", ["--head-dim", "-5"], "size: --head-dim", ("1..65536",), '"-5"'),
        ("size-head-dim-zero", ["--head-dim", "0"], "size: --head-dim", ("1..65536",), '"0"'),
        ("size-head-dim-too-big", ["--head-dim", "65537"], "size: --head-dim", ("1..65536",), '"65537"'),
        ("size-head-dim-suffix", ["--head-dim=64x"], "size: --head-dim", (), '"64x"'),
        ("size-head-dim-u64-overflow", ["--head-dim", "18446744073709551617"], "size: --head-dim", (),
         '"18446744073709551617"'),
        ("size-k-bits-0", ["--head-dim", "64", "--k-bits", "0"], "size: --k-bits", ("1..64",), '"0"'),
        ("size-v-bits-65", ["--head-dim", "64", "--v-bits", "65"], "size: --v-bits", ("1..64",), '"65"'),
        ("size-k-rank-gt-head-dim", ["--head-dim", "64", "--k-rank", "65"], "size: --k-rank",
         ("head-dim = 64",), "65"),
        ("size-tokens-too-big", ["--head-dim", "64", "--tokens", "1099511627777"], "size: --tokens", (),
         '"1099511627777"'),
        ("size-unknown-flag", ["--head-dim", "64", "--heads", "8"], "size", ("unknown option",), '"--heads"'),
        ("size-positional", ["--head-dim", "64", "8"], "size", ("unknown option",), '"8"'),
        ("size-format-xml", ["--head-dim", "64", "--format", "xml"], "size: --format", ("table, csv, json or jsonl",),
         '"xml"'),
        ("size-model-unknown", ["--model", "llama3-8b"], "size: --model", ('did you mean "llama-3-8b"?',),
         '"llama3-8b"'),
        ("size-model-contradicted", ["--model", "llama-3-8b", "--kv-heads", "32"], "size: --kv-heads",
         ("contradicts --model llama-3-8b (kv-heads 8)",), "32"),
        ("size-baseline-both", ["--model", "llama-3-8b", "--baseline-kv-heads", "32", "--baseline-model",
                                "llama-2-7b"], "size", ("leave out one of the two",), "both"),
        ("size-baseline-model-unknown", ["--head-dim", "64", "--baseline-model", "gpt-5"], "size: --baseline-model",
         ("unknown model",), '"gpt-5"'),
        ("size-tokens-ambiguous-K", ["--head-dim", "64", "--tokens", "4K"], "size: --tokens",
         ("k M G T (x 1000^n)", "Ki Mi Gi Ti (x 1024^n)"), '"4K"'),
        ("size-tokens-fraction", ["--head-dim", "64", "--tokens", "1.5k"], "size: --tokens", (), '"1.5k"'),
        ("size-tokens-suffix-alone", ["--head-dim", "64", "--tokens", "k"], "size: --tokens", (), '"k"'),
        ("size-tokens-suffix-overflow", ["--head-dim", "64", "--tokens", "2Ti"], "size: --tokens", ("1..1099511627776",),
         '"2Ti"'),
        ("size-format-missing", ["--head-dim", "64", "--format"], "size", ("missing value after --format",),
         "nothing"),
        ("size-overflow", ["--head-dim", "65536", "--layers", "1048576", "--kv-heads", "1048576", "--tokens",
                           "1099511627776", "--batch", "1073741824"], "size", ("overflows",), None),
    ]
    for name, args, where, what, got in size_bad:
        err_case(name, ["size"] + args, where, what, got)

    size_and_provenance_checks()
    return checks.status()


def size_and_provenance_checks():
    """kvc size's model shapes, baselines, suffixes and JSON; kvc methods NAME and JSON; run/merge provenance."""
    # the lesson's legal assistant in one command: 60,000 tokens, Llama-3-8B shape, FP8, against 32 KV heads in FP16
    lesson = ["size", "--model", "llama-3-8b", "--tokens", "60k", "--k-bits", "8", "--v-bits", "8",
              "--baseline-kv-heads", "32"]
    out = ok_case("size-lesson-one-command", lesson,
                  ("model: llama-3-8b (meta-llama/Meta-Llama-3-8B)", "3932160000 B  (3.66 GiB)",
                   "31457280000 B  (29.30 GiB)", "8.00x"))
    rc, out, err = run(lesson + ["--format", "json"])
    try:
        j = json.loads(out)
    except ValueError:
        j = {}
    want = {"model": "llama-3-8b", "q_heads": 32, "layers": 32, "kv_heads": 8, "head_dim": 128, "tokens": 60000,
            "total_bytes": 3932160000, "fp16_total_bytes": 7864320000, "ratio": 2, "baseline_model": None,
            "baseline_kv_heads": 32, "baseline_total_bytes": 31457280000, "baseline_ratio": 8}
    bad = {k: (j.get(k), v) for k, v in want.items() if j.get(k, "missing") != v}
    report("size-json", None if rc == 0 and not err and not bad else "exit %d %s: %r" % (rc, short(err), bad))
    rc, out2, err = run(lesson + ["--format", "jsonl"])
    report("size-jsonl-one-line-same-object", None if rc == 0 and out2.count("\n") == 1 and json.loads(out2) == j
           else "exit %d %s" % (rc, short(out2)))
    rows = csv_rows(run(lesson + ["--format", "csv"])[1])
    report("size-csv-extra-columns", None if len(rows) == 1 and list(rows[0])[-7:] == [
        "model", "q_heads", "baseline_layers", "baseline_kv_heads", "baseline_head_dim", "baseline_total_bytes",
        "baseline_ratio"] and rows[0]["baseline_total_bytes"] == "31457280000" and rows[0]["baseline_ratio"] == "8"
        else "rows %r" % rows)
    plain = csv_rows(run(["size", "--head-dim", "64", "--format", "csv"])[1])
    report("size-csv-plain-unchanged", None if len(plain) == 1 and list(plain[0])[-1] == "ratio" else "%r" % plain)
    # suffixes: k M G T are powers of 1000, Ki Mi Gi Ti powers of 1024
    for text, n in (("4k", 4000), ("64Ki", 65536), ("1M", 10 ** 6), ("2Mi", 2 << 20), ("1G", 10 ** 9),
                    ("1Gi", 1 << 30), ("1T", 10 ** 12), ("1Ti", 1 << 40), ("4096", 4096)):
        r = csv_rows(run(["size", "--head-dim", "64", "--tokens", text, "--format", "csv"])[1])
        report("size-tokens-suffix[%s]" % text, None if r and r[0]["tokens"] == str(n) else "%r" % r)
    r = csv_rows(run(["size", "--head-dim", "64", "--batch", "2Ki", "--format", "csv"])[1])
    report("size-batch-suffix", None if r and r[0]["batch"] == "2048" else "%r" % r)
    # a model agrees with options that repeat its numbers; another model as the baseline
    ok_case("size-model-agreeing-option", ["size", "--model", "llama-2-7b", "--head-dim", "128", "--layers", "32"],
            ("32 layers x 32 kv heads x head dim 128",))
    ok_case("size-model-case-insensitive", ["size", "--model", "Qwen2.5-7B"], ("28 layers x 4 kv heads",))
    j = json.loads(run(["size", "--model", "gemma-2-9b", "--baseline-model", "llama-2-7b", "--tokens", "8Ki",
                        "--format", "json"])[1] or "{}")
    report("size-baseline-model", None if j.get("baseline_model") == "llama-2-7b" and j.get("baseline_total_bytes") ==
           32 * 32 * 128 * 2 * 2 * 8192 and j.get("total_bytes") == 42 * 8 * 256 * 2 * 2 * 8192 else "%r" % j)

    # data.shape in a config: the geometry of the model; a contradicting key is refused
    shaped = write("shape.json", {"data": {"shape": "llama-3.2-1b", "tokens": 32, "keys": {"generator": "normal"},
                                           "values": {"generator": "normal"}},
                                  "experiments": [{"method": "quantize", "bits": 4}]})
    rc, out, err = run(["run", shaped, "--no-timing", "--format", "csv"])
    rows = csv_rows(out) if rc == 0 else []
    report("config-shape", None if len(rows) == 1 and rows[0]["baseline_bytes"] == str(16 * 8 * 32 * 64 * 2 * 2)
           else "exit %d %s %r" % (rc, short(err), rows))
    rc, out2, err = run(["run", shaped, "--no-timing", "--format", "csv", "--set", "data.layers=16",
                         "--set", "data.head_dim=64", "--set", "data.kv_heads=8", "--set", "data.q_heads=32"])
    same = rc == 0 and rows and csv_rows(out2)[0]["baseline_bytes"] == rows[0]["baseline_bytes"]
    report("config-shape-agreeing-keys", None if same else "exit %d %s" % (rc, short(err)))
    err_case("config-shape-contradicted", ["run", shaped, "--set", "data.kv_heads=4"], "%s: data.kv_heads" % shaped,
             ('contradicts data.shape "llama-3.2-1b" (kv_heads 8)',), "4")
    err_case("config-shape-unknown", ["run", shaped, "--set", 'data.shape="llama-3.2-2b"'], "%s: data.shape" % shaped,
             ("unknown model shape; did you mean",), '"llama-3.2-2b"')
    err_case("config-shape-not-string", ["run", shaped, "--set", "data.shape=8"], "%s: data.shape" % shaped,
             ("must be a model name string",), "8")

    # kvc methods NAME and JSON: the registry as data
    out = ok_case("methods-one", ["methods", "kivi"], ("kivi", "k_bits", "residual"))
    heads = [ln for ln in out.split("\n") if ln and not ln.startswith(" ")]
    report("methods-one-only", None if heads == ["kivi"] else "method lines %r" % heads)
    rc, out, err = run(["methods", "--format", "json"])
    ms = json.loads(out) if rc == 0 else []
    names = [m["name"] for m in ms]
    _, text, _ = run(["methods"])
    text_names = [ln.split()[0] for ln in text.split("\n") if ln and not ln.startswith(" ")]
    report("methods-json-names", None if names == text_names and all(
        {"name", "oracle", "shrinks", "summary", "params"} <= set(m) for m in ms) else "%r" % names)
    q = next((m for m in ms if m["name"] == "quantize"), {})
    bits = next((p for p in q.get("params", []) if p["name"] == "bits"), {})
    axis = next((p for p in q.get("params", []) if p["name"] == "axis"), {})
    report("methods-json-params", None if bits.get("kind") == "int" and bits.get("min") == 2 and bits.get("max") == 8
           and axis.get("choices") == ["token", "channel"] and axis.get("default") == "token" else "%r %r" % (bits, axis))
    rc, out, err = run(["methods", "h2o", "--format", "json"])
    report("methods-json-one-object", None if rc == 0 and json.loads(out)["name"] == "h2o" else short(out))
    rc, out, err = run(["methods", "--format", "jsonl"])
    lines = out.splitlines()
    report("methods-jsonl", None if rc == 0 and [json.loads(x)["name"] for x in lines] == names else short(out))

    # provenance: run --out FILE writes FILE.meta.json (config sha256 as sha256sum prints it); --resume appends
    import hashlib
    res = os.path.join(TMP, "prov.csv")
    rc, _, err = run(["run", PRACTICE, "--no-timing", "--out", res, "--set", "seed=3", "--shard", "1/2", "-q"])
    meta = load(res + ".meta.json") if rc == 0 and os.path.exists(res + ".meta.json") else {}
    r0 = (meta.get("runs") or [{}])[0]
    sha = hashlib.sha256(open(PRACTICE, "rb").read()).hexdigest()
    _, ver, _ = run(["--version"])
    commit = ver.split("\n")[1].split()[-1] if ver.count("\n") > 1 else "?"
    why = None
    if rc != 0 or meta.get("kvc_provenance") != 1 or meta.get("file") != res:
        why = "exit %d %s meta %r" % (rc, short(err), short(meta))
    elif r0.get("config", {}).get("sha256") != sha or r0["config"].get("sets") != ["seed=3"]:
        why = "config %r, want sha256 %s" % (r0.get("config"), sha)
    elif r0.get("kvc", {}).get("commit") != commit or not r0["kvc"].get("blas") or not r0["kvc"].get("decode_isa"):
        why = "kvc %r (--version commit %s)" % (r0.get("kvc"), commit)
    elif r0.get("exit_status") != 0 or not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", r0.get("finished") or ""):
        why = "finished %r exit %r" % (r0.get("finished"), r0.get("exit_status"))
    elif r0.get("options", {}).get("shard") != "1/2" or r0["options"].get("format") != "csv" or \
            r0.get("command", [])[1:3] != ["run", PRACTICE] or not r0.get("machine", {}).get("cpu"):
        why = "options %r command %r" % (r0.get("options"), r0.get("command"))
    report("provenance-run-sidecar", why)
    rc, _, err = run(["run", PRACTICE, "--no-timing", "--out", res, "--set", "seed=3", "--resume", "-q"])
    meta = load(res + ".meta.json") if rc == 0 else {}
    runs = meta.get("runs", [])
    report("provenance-resume-appends", None if len(runs) == 2 and runs[1]["options"]["resume"] is True and
           runs[0] == r0 else "exit %d %s runs %d" % (rc, short(err), len(runs)))
    rc, out, _ = run(["run", PRACTICE, "--no-timing", "--format", "csv", "--set", "seed=3"])
    report("provenance-rows-unchanged", None if rc == 0 and open(res).read() == out else "the --out file differs")
    merged = os.path.join(TMP, "merged.csv")
    rc, _, err = run(["merge", "--config", PRACTICE, "--set", "seed=3", res, "--out", merged])
    mm = load(merged + ".meta.json") if rc == 0 else {}
    ins = (mm.get("runs") or [{}])[0].get("inputs", [])
    report("provenance-merge-sidecar", None if len(ins) == 1 and ins[0]["path"] == res and
           ins[0]["sha256"] == hashlib.sha256(open(res, "rb").read()).hexdigest() and ins[0]["runs"] == runs
           else "exit %d %s inputs %r" % (rc, short(err), short(ins)))
    rc, _, err = run(["run", PRACTICE, "--no-timing", "--out", os.devnull, "--format", "csv", "-q"])
    report("provenance-none-for-devices", None if rc == 0 and not os.path.exists(os.devnull + ".meta.json")
           else "exit %d %s" % (rc, short(err)))
    table = os.path.join(TMP, "prov.txt")
    rc, _, err = run(["run", PRACTICE, "--no-timing", "--out", table, "-q"])
    report("provenance-table-sidecar", None if rc == 0 and load(table + ".meta.json")["runs"][0]["options"]["format"]
           == "table" else "exit %d %s" % (rc, short(err)))

    # kvc bench: JSON rows (the CSV's columns, ms_mad and outliers), the provenance in json, --csv-file's sidecar
    tiny = ["bench", "--tokens", "1Ki", "--kv-heads", "1", "--head-dim", "32", "--formats", "f16,q8_0", "--threads",
            "1", "--repeat", "5", "--naive-repeat", "0", "--bw-mib", "4", "--evict-mib", "4"]
    rc, out, err = run(tiny + ["--format", "csv"])
    header = out.split("\n")[0].split(",") if rc == 0 else []
    rc, out, err = run(tiny + ["--format", "jsonl"])
    objs = [json.loads(x) for x in out.splitlines()] if rc == 0 else []
    report("bench-jsonl", None if len(objs) == 2 and header and all(
        set(header) | {"ms_mad", "outliers"} == set(o) and o["tokens"] == 1024 and o["ms_mad"] >= 0 and
        isinstance(o["outliers"], int) and o["naive_ms"] is None for o in objs)
        else "exit %d %s %r" % (rc, short(err), objs[:1]))
    rc, out, err = run(tiny + ["--format", "json"])
    j = json.loads(out) if rc == 0 else {}
    report("bench-json", None if len(j.get("results", [])) == 2 and j.get("provenance", {}).get("plan", {}).get(
        "tokens") == 1024 and j["provenance"]["bandwidth"][0]["threads"] == 1 and j["provenance"]["kvc"]["commit"]
        else "exit %d %s %s" % (rc, short(err), short(j)))
    bcsv = os.path.join(TMP, "bench.csv")
    rc, out, err = run(tiny + ["--format", "csv", "--csv-file", bcsv])
    bm = load(bcsv + ".meta.json") if rc == 0 and os.path.exists(bcsv + ".meta.json") else {}
    report("bench-csv-file-sidecar", None if bm.get("file") == bcsv and bm["runs"][0]["plan"]["repeat"] == 5 and
           open(bcsv).read() == out else "exit %d %s %s" % (rc, short(err), short(bm)))
    # interrupted part way, --csv-file leaves the file it would replace as it was, and no temporary
    with open(bcsv, "w") as f:
        f.write("old\n")
    p = subprocess.Popen([KVC, "bench", "--tokens", "256Ki", "--kv-heads", "8", "--head-dim", "128", "--formats",
                          "f16", "--threads", "1", "--repeat", "1000", "--naive-repeat", "0", "--bw-mib", "4",
                          "--csv-file", bcsv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)   # not SIGINT: a test runner in the background may have it ignored
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    left = [x for x in os.listdir(TMP) if x.startswith("bench.csv.tmp")]
    report("bench-csv-file-interrupted", None if p.returncode != 0 and open(bcsv).read() == "old\n" and not left
           else "exit %s, file %r, temporaries %s" % (p.returncode, open(bcsv).read()[:80], left))
    rc, out, err = run(tiny)
    head = next((ln for ln in out.split("\n") if ln.startswith("format ")), "")
    report("bench-table-outliers-column", None if rc == 0 and head.split()[-1] == "outl" and
           re.search(r"^# kvc \S+ \(commit \S+\) bench$", out, re.M) else "exit %d %s" % (rc, short(out)))
    err_case("bench-format-xml", ["bench", "--format", "xml"], "bench: --format", ("table, csv, json or jsonl",),
             '"xml"')


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
