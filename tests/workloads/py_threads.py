"""py_threads.py - a Python workload for the LD_PRELOAD tests: threads build dicts, lists
and strings, hand objects to each other through a queue, and check every sum against its
closed form. Prints "py_threads: OK <checksum>" on success, exits 1 otherwise."""
import queue
import sys
import threading

THREADS = 8
N = 100000


def build(tid, results, q):
    d = {}
    for i in range(N):
        d[f"k{tid}-{i}"] = [i, str(i) * (i % 7 + 1), {"v": i}]
    total = sum(v[0] for v in d.values())
    if total != N * (N - 1) // 2:
        raise AssertionError(f"dict sum {total}")
    text = "".join(chr(97 + i % 26) for i in range(N))
    if len(text) != N or text.count("a") != (N + 25) // 26:
        raise AssertionError("string")
    chunks = [text[i:i + 100] * 3 for i in range(0, N, 100)]
    for i in range(0, len(chunks), 2):
        q.put(chunks[i])
    lst = sorted(range(N, 0, -1))
    if lst[0] != 1 or lst[-1] != N:
        raise AssertionError("sort")
    del d
    results[tid] = total + len(chunks)


def consume(count, q, out):
    got = 0
    for _ in range(count):
        got += len(q.get(timeout=60))
    out.append(got)


def main():
    q = queue.Queue()
    results = [None] * THREADS
    threads = [threading.Thread(target=build, args=(t, results, q)) for t in range(THREADS)]
    chunks_per_thread = (N + 99) // 100
    per_thread = (chunks_per_thread + 1) // 2
    consumed = []
    consumers = [threading.Thread(target=consume, args=(per_thread * 2, q, consumed))
                 for _ in range(THREADS // 2)]
    for t in threads + consumers:
        t.start()
    for t in threads + consumers:
        t.join()
    if None in results:
        print("py_threads: FAIL a thread raised", file=sys.stderr)
        return 1
    want = THREADS * per_thread * 300
    if sum(consumed) != want:
        print(f"py_threads: FAIL consumed {sum(consumed)} want {want}", file=sys.stderr)
        return 1
    print(f"py_threads: OK {sum(results) + sum(consumed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
