"""The one timing loop of the GPU benchmarks: CUDA events around each call, the median after a
warm-up, and the SM clock read right after (NVML, else nvidia-smi), so that a gap between two
figures can be told apart from a clock change."""
import subprocess
import time

import torch


class SmClock:
    """Reads the current SM clock (MHz) of the device torch uses; None when nothing can read it."""

    def __init__(self):
        self.nvml = None
        self.index = torch.cuda.current_device()
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception:
            self.nvml = None

    def mhz(self):
        if self.nvml is not None:
            try:
                return int(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
            except Exception:
                return None
        try:
            out = subprocess.run(["nvidia-smi", "-i", str(self.index), "--query-gpu=clocks.sm",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
            return int(out.stdout.strip().splitlines()[0])
        except Exception:
            return None


def median_ms(fn, warm=3, rep=10, idle=0.0):
    """Median milliseconds of `rep` calls of fn after `warm` calls; idle seconds of sleep before
    the timed calls (lets a clock that boosted during the warm-up settle, where wanted)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    if idle:
        time.sleep(idle)
    ts = []
    for _ in range(rep):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
