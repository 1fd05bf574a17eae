"""gil.py — measures whether a call releases the GIL, for the tests of jomoim's bindings.

A Python thread counts in a loop while the main thread makes the call. With a long switch
interval, the counter can only advance during the call if the call released the GIL. Works on
one CPU too (the OS then shares it).
"""
import sys
import threading
import time


def count_during(call):
    """Runs call() once; returns (elapsed seconds, counts the other thread made during the call,
    its free rate in counts per second measured right after, while the main thread sleeps)."""
    count = [0]
    stop = threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=counter)
    t.start()
    try:
        time.sleep(0.05)
        old = sys.getswitchinterval()
        sys.setswitchinterval(1.0)  # while the main thread holds the GIL, the counter stays put
        try:
            before = count[0]
            start = time.perf_counter()
            call()
            elapsed = time.perf_counter() - start
            during = count[0] - before
            time.sleep(0)
            before_idle = count[0]
            idle_start = time.perf_counter()
            time.sleep(0.02)  # the main thread releases the GIL in sleep: the counter's free rate
            rate = (count[0] - before_idle) / (time.perf_counter() - idle_start)
        finally:
            sys.setswitchinterval(old)
    finally:
        stop.set()
        t.join()
    return elapsed, during, rate
