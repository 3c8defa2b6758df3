export PYTHONPATH=. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1
python3 -c "import torch,sys;print(torch.__version__, torch.version.cuda, sys.version)" >> $OUT/gpu.txt 2>&1
git rev-parse HEAD >> $OUT/gpu.txt 2>&1
date -u +%s > $OUT/t0
timeout 110 python3 benchmarks/step_cost.py --device cuda --levels counters auto --steps 300 --rounds 3 --parts > $OUT/step_cost.txt 2>&1; echo "rc $?" >> $OUT/step_cost.txt
timeout 190 python3 benchmarks/overhead.py --device cuda --steps 200 --reps 4 --levels counters auto --no-reference > $OUT/overhead.txt 2>&1; echo "rc $?" >> $OUT/overhead.txt
timeout 200 python3 benchmarks/gpu_acceptance.py /tmp/acc --parts allocator,cuda_tests,scenarios,headroom --budget 185 > $OUT/acceptance.txt 2>&1; echo "rc $?" >> $OUT/acceptance.txt
tar czf $OUT/acc.tgz --exclude=acc/work -C /tmp acc
date -u +%s >> $OUT/t0
