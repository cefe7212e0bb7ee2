"""The turnstile the pages share: one timing at a time, in arrival order."""

import threading
import time

from ui.turnstile import Turnstile


def test_turnstile_serves_one_at_a_time_in_arrival_order():
    gate = Turnstile()
    order, running, peak = [], [0], [0]

    def worker(name):
        gate.enter()
        try:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            order.append(name)
            time.sleep(0.05)
            running[0] -= 1
        finally:
            gate.leave()

    gate.enter()  # hold the turnstile while the workers queue up in a known order
    threads = []
    for name in range(4):
        thread = threading.Thread(target=worker, args=(name,))
        thread.start()
        threads.append(thread)
        while gate.queue_length() < name + 2:
            time.sleep(0.01)
    assert gate.queue_length() == 5
    gate.leave()
    for thread in threads:
        thread.join()
    assert order == [0, 1, 2, 3] and peak[0] == 1
