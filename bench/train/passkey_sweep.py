#!/usr/bin/env python3
"""Runs passkey_mirror.py over many configs at once (one process each, several at a time on
one GPU or several CPU threads). Usage: passkey_sweep.py CONFIGS OUT.jsonl [parallel] [extra args]
CONFIGS: one run per line, "tag: --flag value ...", '#' comments."""
import os
import shlex
import subprocess
import sys
import time

cfg_file, out = sys.argv[1], sys.argv[2]
par = int(sys.argv[3]) if len(sys.argv) > 3 else 8
extra = sys.argv[4:]
here = os.path.dirname(os.path.abspath(__file__))
runs = []
for line in open(cfg_file):
    line = line.split("#")[0].strip()
    if line:
        tag, args = line.split(":", 1)
        runs.append((tag.strip(), shlex.split(args)))
logdir = os.path.splitext(out)[0] + "_logs"
os.makedirs(logdir, exist_ok=True)
live = []
t0 = time.time()
while runs or live:
    while runs and len(live) < par:
        tag, args = runs.pop(0)
        cmd = [sys.executable, os.path.join(here, "passkey_mirror.py"), "--tag", tag, "--json", out] + extra + args
        log = open(os.path.join(logdir, tag + ".log"), "w")
        live.append((tag, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
    for item in list(live):
        if item[1].poll() is not None:
            item[2].close()
            live.remove(item)
            print("%6.0fs done %s rc=%d" % (time.time() - t0, item[0], item[1].returncode), flush=True)
    time.sleep(1)
