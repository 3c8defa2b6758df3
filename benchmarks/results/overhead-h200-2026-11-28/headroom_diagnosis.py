"""Device-only diagnosis: is confirm=True's lower limit memleak's or the process state's?
bisect (the acceptance's) -> confirm -> bisect again, each with the free memory printed."""
import sys, time, torch, memleak  # run from the repository root: PYTHONPATH=. python3 THIS
sys.path.insert(0, "benchmarks")
from acceptance.headroom import make_step, bisect_oom

class Ctx:
    partial = {}
    def time_left(self): return 100

dev = torch.device("cuda", 0)
torch.backends.cuda.matmul.allow_tf32 = True
step = make_step(8192, dev) if len(sys.argv) < 2 else make_step(int(sys.argv[1]), dev)
def free(): torch.cuda.empty_cache(); f, t = torch.cuda.mem_get_info(); return f"free {f/2**30:.2f} GiB reserved {torch.cuda.memory_reserved()/2**30:.2f} allocated {torch.cuda.memory_allocated()/2**30:.3f}"
t=time.time()
print("start", free(), flush=True)
a = bisect_oom(step, 16384, dev, Ctx()); print("bisect 1", a, free(), round(time.time()-t,1), flush=True)
c = memleak.headroom(step, batch_sizes=[1024, 2048, 4096], margin=0.1, device=dev, confirm=True)
print("confirm", c.confirmed_batch, c.oom_batch, c.confirm_tries, free(), round(time.time()-t,1), flush=True)
b = bisect_oom(step, 16384, dev, Ctx()); print("bisect 2", b, free(), round(time.time()-t,1), flush=True)
