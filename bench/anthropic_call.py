"""Benchmark: the wall time of one `AnthropicModel.complete` call with nothing on the wire.

The SDK talks to an in-process mock transport that answers at once with a short streamed
reply, and the call is given an abort event, as the runner always does. What is left is the
model's own overhead per call: building the request, the SDK, reading the stream, and the
abort watcher. (It used to wait for its watcher thread to wake from a 50 ms poll after every
call, which made a 2,000-turn offline run take minutes instead of seconds.)

Usage::

    python bench/anthropic_call.py [--calls 200] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import anthropic
import httpx2

from agent.models import ModelRequest
from agent.models.anthropic import AnthropicModel

EVENTS = [
    {"type": "message_start", "message": {
        "id": "msg", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
]
BODY = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in EVENTS)


def handler(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, content=BODY, headers={"content-type": "text/event-stream"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    client = anthropic.Anthropic(api_key="bench", max_retries=0,
                                 http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))
    model = AnthropicModel("claude-sonnet-4-6", client=client)
    request = ModelRequest(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}],
                                      "timestamp": 0}])
    abort = threading.Event()
    model.complete(request, abort=abort)  # warm up
    times = []
    for _ in range(args.calls):
        started = time.perf_counter()
        model.complete(request, abort=abort)
        times.append((time.perf_counter() - started) * 1000)
    result = {"calls": args.calls, "median_ms": round(statistics.median(times), 3),
              "p90_ms": round(statistics.quantiles(times, n=10)[-1], 3),
              "total_s": round(sum(times) / 1000, 3)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['calls']} calls: median {result['median_ms']} ms, p90 "
              f"{result['p90_ms']} ms, total {result['total_s']} s")


if __name__ == "__main__":
    main()
