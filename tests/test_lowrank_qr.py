#!/usr/bin/python3
"""Differential test of lowrank's QR route against the numpy oracle (tests/oracle.py).

src/methods/lowrank.c decomposes a tall matrix of at least 2^20 numbers through a blocked QR and the SVD of its
small factor R (base/linalg.h la_svd_right), shared by every experiment on the same data tensor of a run, instead
of numpy's dgesdd call; the random configs of tests/test_differential*.py are all below that size, so this test
runs configs at and above it (8192 x 128 per head, or a joint basis over 2 heads of 4096 x 128: 2^20 stacked while
each head alone stays on the dgesdd route): several ranks and an energy of one tensor from one shared
decomposition, K and V, --per-head rows, keys of exact rank 16 (singular values 17..128 at rounding level) and
pipelines that quantize the coefficients asymmetrically, with FP16 scales and mins in KIVI's case (where the
singular vectors' signs matter: numpy's must be reproduced). Tolerances: tests/difftools.py (relative 1e-9).

Run from the project root: /usr/bin/python3 tests/test_lowrank_qr.py   (KVC=path overrides ./kvc)
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import difftools  # noqa: E402

DATA = {"tokens": 8192, "head_dim": 128,
        "keys": {"generator": "lowrank", "rank": 16, "scale": 0.25, "noise": 0.1},
        "values": {"generator": "normal"},
        "query": {"generator": "look_back", "count": 3, "weight": 0.5, "noise": 0.5}}


def cfg(exps, seed=5, **data):
    d = dict(DATA)
    d.update(data)
    return {"seed": seed, "data": {k: v for k, v in d.items() if v is not None}, "experiments": exps}


def configs():
    ranks = {"method": "lowrank", "rank": [1, 17, 128], "apply_to": ["k", "kv"]}
    energy = {"method": "lowrank", "energy": 0.999, "apply_to": "v"}
    pipes = [{"method": "pipeline", "steps": [{"method": "lowrank", "rank": 24, "apply_to": "kv"},
                                              {"method": "quantize", "bits": 4, "symmetric": False,
                                               "axis": "channel"}]},
             {"method": "pipeline", "steps": [{"method": "lowrank", "rank": 12},
                                              {"method": "kivi", "k_bits": 2, "v_bits": 4, "group_size": 16}]}]
    joint = {"method": "lowrank", "rank": 32, "joint": [True, False], "apply_to": "kv"}
    exact_rank = {"keys": {"generator": "lowrank", "rank": 16, "scale": 0.25}}
    return [
        ("qr-ranks", cfg([ranks, energy]), False),
        ("qr-ranks-per-head", cfg([dict(ranks, rank=[2, 20, 105])], tokens=10000, head_dim=105), True),
        ("qr-pipelines", cfg(pipes), False),
        ("qr-joint", cfg([joint], kv_heads=2, tokens=4096, q_heads=4), False),
        ("qr-exact-rank-keys", cfg([{"method": "lowrank", "rank": [8, 16, 40], "apply_to": "k"}], seed=9,
                                   **exact_rank), False),
        ("qr-keys-only", cfg([{"method": "lowrank", "energy": 0.8}], values=None, query=None), False),
    ]


def main():
    tmp = tempfile.mkdtemp(prefix="kvc-lowrank-qr-")
    difftools.check_all(tmp, configs(), show_rows=True, timeout=300)
    return difftools.finish(tmp)


if __name__ == "__main__":
    sys.exit(main())
