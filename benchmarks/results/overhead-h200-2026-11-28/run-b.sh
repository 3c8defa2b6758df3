export PYTHONPATH=. PYTHONUNBUFFERED=1
(git rev-parse HEAD; git status --short; nvidia-smi --query-gpu=name,driver_version --format=csv) > $OUT/machine.txt 2>&1
timeout 100 python3 benchmarks/step_cost.py --device cuda --levels counters auto --steps 300 --rounds 3 --parts > $OUT/step_cost.txt 2>&1; echo "rc $?" >> $OUT/step_cost.txt
timeout 45 python3 benchmarks/detection.py leak_profiler_never_stopped benign_profiler_schedule --level counters auto --default-device cuda > $OUT/profiler.txt 2>&1; echo "rc $?" >> $OUT/profiler.txt
timeout 60 python3 device_headroom.py > $OUT/headroom.txt 2>&1; echo "rc $?" >> $OUT/headroom.txt
timeout 150 python3 benchmarks/overhead.py --device cuda --steps 200 --reps 3 --levels counters auto --no-reference > $OUT/overhead.txt 2>&1; echo "rc $?" >> $OUT/overhead.txt
