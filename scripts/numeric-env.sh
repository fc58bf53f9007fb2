# numeric-env.sh: sourced (". scripts/numeric-env.sh") by tests/run.sh and scripts/make-results.sh so that the
# full-precision digits kvc and the numpy oracle print do not depend on which x86 CPU runs them.
# - OpenBLAS picks its kernels by CPU at load time; its AVX-512 kernels (SkylakeX, Cooper Lake, Sapphire Rapids)
#   sum in another order than its AVX2 ones and change the last bits of dgemm/dgemv results. Where the CPU has
#   AVX2, OPENBLAS_CORETYPE=Haswell selects the AVX2 kernels everywhere (Zen machines use them already).
# - numpy 1.24 dispatches float64 exp/log to AVX-512 versions that are not the scalar libm results; the oracle
#   turns them off (NPY_DISABLE_CPU_FEATURES) for the AVX-512 features this numpy found.
# An explicit OPENBLAS_CORETYPE or NPY_DISABLE_CPU_FEATURES in the environment is kept.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
    OPENBLAS_CORETYPE=Haswell
    export OPENBLAS_CORETYPE
fi
if [ -z "${NPY_DISABLE_CPU_FEATURES:-}" ] && [ -x "${PY:-/usr/bin/python3}" ]; then
    _npy_avx512=$("${PY:-/usr/bin/python3}" -c '
try:
    from numpy.core._multiarray_umath import __cpu_features__ as f, __cpu_dispatch__ as d
    print(" ".join(k for k in d if k.startswith("AVX512") and f.get(k)))
except Exception:
    pass' 2>/dev/null || true)
    if [ -n "$_npy_avx512" ]; then
        NPY_DISABLE_CPU_FEATURES=$_npy_avx512
        export NPY_DISABLE_CPU_FEATURES
    fi
    unset _npy_avx512
fi
