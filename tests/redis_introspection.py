#!/usr/bin/env python3
"""redis_introspection.py LIBSTRATA - Redis preloaded with strata reads strata's mallctl:
INFO memory's allocator_* fields must be strata's figures (allocator_allocated close to
Redis's own used_memory and equal to stats.allocated's order), MEMORY MALLOC-STATS
prints strata's malloc_stats_print text, MEMORY PURGE (arena.<narenas>.purge) succeeds.
Exit 77 (ctest SKIP) when redis-server or redis-cli is missing."""
import os, shutil, socket, subprocess, sys, time


def main():
    lib = sys.argv[1]
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not server or not cli:
        print("SKIP: redis-server / redis-cli not installed (apt-get install redis)")
        return 77
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = str(s.getsockname()[1])
    s.close()
    env = dict(os.environ, LD_PRELOAD=lib)
    for k in ("MALLOC_CONF", "STRATA_CONF"):
        env.pop(k, None)
    p = subprocess.Popen([server, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fails = []

    def rc(*args):
        return subprocess.run([cli, "-p", port] + list(args), capture_output=True, text=True, timeout=30).stdout

    try:
        for _ in range(100):
            if rc("ping").strip() == "PONG":
                break
            time.sleep(0.05)
        # 20,000 keys of 200 bytes through a pipe
        cmds = "".join(f"SET key:{i} {'x' * 200}\r\n" for i in range(20000))
        subprocess.run([cli, "-p", port, "--pipe"], input=cmds, capture_output=True, text=True, timeout=60)
        # Redis samples the allocator_* fields in its cron (every 100 ms at hz 10), not at
        # INFO time: wait for a sample taken after the load (used_memory is live).
        for _ in range(40):
            info = dict(l.split(":", 1) for l in rc("info", "memory").splitlines() if ":" in l)
            used, alloc = int(info["used_memory"]), int(info["allocator_allocated"])
            if alloc >= 0.9 * used:
                break
            time.sleep(0.05)
        active, resident = int(info["allocator_active"]), int(info["allocator_resident"])
        print(f"used_memory {used}, allocator_allocated {alloc}, active {active}, resident {resident}")
        if not (0.9 * used <= alloc <= 1.3 * used):
            fails.append(f"allocator_allocated {alloc} vs used_memory {used}")
        if not (alloc <= active <= resident):
            fails.append(f"allocated {alloc} <= active {active} <= resident {resident} does not hold")
        ms = rc("memory", "malloc-stats")
        if "Begin jemalloc statistics" not in ms or "(strata)" not in ms or "bins:" not in ms:
            fails.append("MEMORY MALLOC-STATS: " + ms[:300])
        rc("flushall")
        out = rc("memory", "purge").strip()
        if out != "OK":
            fails.append(f"MEMORY PURGE answered {out!r}")
    finally:
        p.terminate()
        p.wait()
    for f in fails:
        print("FAIL:", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
