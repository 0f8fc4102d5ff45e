"""Benchmark: what redaction costs a run, by the secrets the redactor knows (not a test).

A *run's redaction* is what the store redacts for one ordinary run, modelled on the runs of
``bench/runs.py`` plus a step that talks a little: 4 executor log lines, 20 lines of a step's
``ctx.log`` (80-200 characters, some with a URL, a key=value pair, a quoted JSON body), one
4 KiB traceback, the step's output (a dict of 10 values) and its parameters, and the texts of
6 audit events (messages and payloads). ``--big`` adds one 64 KiB log message (the largest a
line can be).

Configurations (``--secrets``):

- ``2``: two 24-character secrets (what ``bench/runs.py`` registers);
- ``200``: 200 secrets of 12 to 64 characters, letters, digits and punctuation;
- ``64k``: one 64 KiB secret (the largest accepted: a PEM-like text, lines of base64);
- ``64k+200``: both.

For each it prints the time to build the redactor's patterns (once per process and per
change of the secrets) and the median time of a run's redaction over ``--reps`` runs, as
JSON lines. The texts hold no secret, the usual case; ``--leak`` puts one secret of the set
in a log line of each run.

Usage::

    python bench/redaction.py                       # every configuration
    python bench/redaction.py --secrets 200 --big --reps 200
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import string
import sys
import time
from typing import Any

from cadenza.audit import Redactor

CONFIGS = ("2", "200", "64k", "64k+200")
_PUNCT = "!#$%&()*+,-./:;<=>?@[]^_{|}~"


def secrets_for(config: str, rand: random.Random) -> list[str]:
    """The secret values of one configuration."""
    out: list[str] = []
    if config == "2":
        out += ["".join(rand.choices(string.ascii_letters + string.digits, k=24))
                for _ in range(2)]
    if config.endswith("200"):
        alphabet = string.ascii_letters + string.digits + _PUNCT
        out += ["".join(rand.choices(alphabet, k=rand.randint(12, 64))) for _ in range(200)]
    if config.startswith("64k"):
        b64 = string.ascii_letters + string.digits + "+/"
        lines = ["-----BEGIN OPAQUE BLOB-----"]
        while sum(len(x) + 1 for x in lines) < 64 * 1024 - 200:
            lines.append("".join(rand.choices(b64, k=64)))
        lines.append("-----END OPAQUE BLOB-----")
        out.append("\n".join(lines))
    return out


def run_texts(rand: random.Random, big: bool) -> tuple[list[str], list[Any]]:
    """The texts (``redact_text``) and values (``redact_value``) of one run."""
    words = ["loaded", "rows", "from", "sales", "region", "north", "batch", "commit",
             "http", "GET", "200", "in", "0.12s", "file", "month", "2026-11"]

    def line(n: int) -> str:
        return " ".join(rand.choices(words, k=n))

    texts = ["started (python)", "succeeded: 120 rows in 0.03s", "run SUCCEEDED: 120 rows",
             "config: {\"callable\": \"sales:load\", \"isolation\": \"thread\"}"]
    for k in range(20):
        text = line(rand.randint(12, 30))
        if k % 5 == 1:
            text += " GET https://api.example.org/v1/sales?month=2026-11&page=3 -> 200"
        elif k % 5 == 2:
            text += " user=loader mode=append retries=3"
        elif k % 5 == 3:
            text += ' body {"id": 42, "status": "ok", "items": [1, 2, 3]}'
        texts.append(text)
    tb = ["Traceback (most recent call last):"]
    while sum(map(len, tb)) < 4096:
        tb.append(f'  File "/home/app/plugins/sales.py", line {rand.randint(1, 400)}, in '
                  f"load\n    {line(8)}")
    texts.append("\n".join(tb))
    if big:
        texts.append(line(12000)[:64 * 1024])
    texts += ["step load (attempt 1) RUNNING -> SUCCEEDED", "run RUNNING -> SUCCEEDED",
              "run of sales-load finished SUCCEEDED"]
    output = {"rows": 120, "path": "data/files/sales/2026-11.csv", "status": 200,
              "region": "north", "month": "2026-11", "total": 10234.5, "skipped": 0,
              "warnings": ["empty line 12"], "json": {"a": {"b": 1}}, "ok": True}
    params = {"month": "2026-11", "region": "north", "dry_run": False}
    events = [{"step": "load", "rows": 120, "url": "https://api.example.org/v1/sales",
               "status": 200, "elapsed_ms": 120}]
    return texts, [output, params, *events]


def measure(config: str, reps: int, big: bool, leak: bool) -> dict[str, Any]:
    rand = random.Random(12)
    secrets = secrets_for(config, rand)
    t0 = time.perf_counter()
    redactor = Redactor(secrets)
    redactor.redact_text("warm")  # compiles the patterns
    compile_s = time.perf_counter() - t0
    texts, values = run_texts(rand, big)
    if leak:
        texts[5] += f" token {secrets[len(secrets) // 2]}"
    timings = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for text in texts:
            redactor.redact_text(text)
        for value in values:
            redactor.redact_value(value)
        timings.append(time.perf_counter() - t0)
    if leak:
        assert secrets[len(secrets) // 2] not in redactor.redact_text(texts[5])
    chars = sum(map(len, texts))
    return {"secrets": config, "big_line": big, "leak": leak, "texts": len(texts),
            "characters": chars, "compile_ms": round(compile_s * 1e3, 1),
            "run_ms_median": round(statistics.median(timings) * 1e3, 3),
            "run_ms_min": round(min(timings) * 1e3, 3),
            "run_ms_max": round(max(timings) * 1e3, 3), "reps": reps}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--secrets", choices=CONFIGS, action="append",
                        help="a configuration (repeatable; default: all)")
    parser.add_argument("--reps", type=int, default=100)
    parser.add_argument("--big", action="store_true", help="add one 64 KiB log message")
    parser.add_argument("--leak", action="store_true", help="one secret in a log line")
    args = parser.parse_args(argv)
    for config in args.secrets or CONFIGS:
        print(json.dumps(measure(config, args.reps, args.big, args.leak)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
