export TILEX_CACHE_DIR=/tmp/tilex_cache6
python3 -m pytest -q -m gpu -n 14 -p no:cacheprovider tests 2>&1 | grep -v -i warn | tee $OUT/gpu.log | tail -8
for e in column_sum splitk_gemm; do timeout 120 python3 examples/$e.py 2>&1 | tail -2; done | tee $OUT/examples.txt
python3 benchmarks/bench_gemm.py 2>&1 | tail -4 | tee $OUT/bench_gemm.txt
