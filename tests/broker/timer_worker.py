"""A broker process for the timer crash test: sends timers, delivers them, gets killed.

Run as ``python timer_worker.py SPEC_JSON``; SPEC has ``path``, ``store``, ``run``, ``count``,
``batch``, ``seed``, ``min_ms``, ``max_ms``, ``precision_ms``. The broker sends ``count``
timer messages to topic ``T`` in batches, each due ``min_ms``..``max_ms`` after it is sent,
key ``r<run>-<i>``, and prints one JSON line per acknowledged batch
(``{"keys": [...], "due": [...]}``, one ``os.write``, so a line read is complete); then it
keeps delivering until it is killed.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from mqcore import Broker, Message


def main() -> None:
    spec = json.loads(sys.argv[1])
    rnd = random.Random(spec["seed"])
    broker = Broker(spec["path"], store=spec["store"], timer_precision_ms=spec["precision_ms"])
    broker.create_topic("T", queue_nums=4)
    os.write(1, b'{"ready": true}\n')
    sent = 0
    while sent < spec["count"]:
        now = time.time_ns() // 1_000_000
        keys = [f"r{spec['run']}-{sent + i}" for i in range(spec["batch"])]
        due = [now + rnd.randint(spec["min_ms"], spec["max_ms"]) for _ in keys]
        msgs = [
            Message(topic="T", body=k.encode(), keys=k, deliver_time_ms=d)
            for k, d in zip(keys, due, strict=True)
        ]
        broker.send_message("T", (sent // spec["batch"]) % 4, msgs)
        os.write(1, (json.dumps({"keys": keys, "due": due}) + "\n").encode())
        sent += len(keys)
    while True:  # the timer thread delivers; the test kills this process
        time.sleep(1)


if __name__ == "__main__":
    main()
