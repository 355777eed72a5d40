export TILEX_CACHE_DIR=/tmp/tilex_cache5
python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider tests 2>&1 | grep -v -i warn | tee $OUT/gpu.log | tail -25
python3 benchmarks/bench_ops.py 2>&1 | tail -6 | tee $OUT/ops.txt
for e in softmax norms column_sum transpose gemm_epilogue splitk_gemm quickstart; do timeout 120 python3 examples/$e.py 2>&1 | tail -2; done | tee $OUT/examples.txt
