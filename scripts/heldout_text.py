#!/usr/bin/python3
"""heldout_text.py: writes the text configs/model-lm.json feeds the `lm` model: the first BYTES bytes of the
held-out part (the last 5 %) of the training text of scripts/train_lm.py -- "The Debian Administrator's
Handbook" by Raphael Hertzog and Roland Mas (Debian package debian-handbook; GPL-2.0+ or CC-BY-SA-3.0), as
train_lm.py extracts it -- so that the model is measured on text it was not trained on.

  scripts/heldout_text.py [--out configs/data/lm-heldout.txt] [--bytes 4096] [--data-dir build/data]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_lm  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="configs/data/lm-heldout.txt")
    ap.add_argument("--bytes", type=int, default=4096)
    ap.add_argument("--data-dir", default="build/data")
    a = ap.parse_args()
    data, version, sha = train_lm.corpus(a.data_dir, lambda msg: print(msg, file=sys.stderr))
    held = data[int(len(data) * 0.95):]
    with open(a.out, "wb") as f:
        f.write(held[:a.bytes].tobytes())
    print("wrote %s: %d bytes from the held-out text of debian-handbook %s (corpus sha256 %s)" %
          (a.out, min(a.bytes, len(held)), version, sha), file=sys.stderr)


if __name__ == "__main__":
    main()
