"""The model's selection regret recomputed on the CPU from recorded times: for each row of a
regret.py markdown report (bench/results/*attention-regret*.md), the decision the dispatch would
make now (the current mymetaops.model, for the problem's bucket) against the candidate times that
run measured. For trying a model change against past measurements before spending GPU time on it;
in-sample by nature: a change fitted to these rows needs a fresh regret.py run.

    python bench/attention/offline_regret.py bench/results/<date>-<gpu>-attention-regret-<run>.md [...]
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
from regret import BOUND, lengths_of  # noqa: E402

ROW = re.compile(r"\| B(\d+) N(\d+) H(\d+) D(\d+) \| (\w+) \| (\w+) \| [^|]+\| [\d.]+ \| ([^|]+) \|")


def rows(path: str):
    """(batch, max_len, heads, dim, lengths, op, {candidate: us}) of each measured row."""
    for line in Path(path).read_text().splitlines():
        m = ROW.match(line)
        if m and "ERR" not in m.group(7):
            batch, n, heads, dim = map(int, m.groups()[:4])
            times = {k.strip(): float(v) for k, v in (x.rsplit(":", 1) for x in m.group(7).split(","))}
            yield batch, n, heads, dim, m.group(5), m.group(6), times


def main(paths: list[str]) -> int:
    from mymetaops import model
    from mymetaops.model import attention
    hw = model.get_hardware("H200")
    regrets = []
    for path in paths:
        for batch, n, heads, dim, dist, op, times in rows(path):
            total = int(lengths_of(dist, batch, n).sum())
            p = attention.AttentionProblem(op, batch, n, total, heads, dim, dim)
            choice = str(model.decide_bucketed(op, p, hw, "auto", True).decision.choice.config)
            regret = times[choice] / min(times.values())
            regrets.append(regret)
            if regret > BOUND:
                print(f"B{batch} N{n} H{heads} D{dim} {dist} {op}: {choice} {regret:.3f} ({times})")
    if not regrets:
        print("no measured rows")
        return 1
    mean = math.exp(sum(map(math.log, regrets)) / len(regrets))
    print(f"geometric mean {mean:.4f} over {len(regrets)} problems, worst {max(regrets):.3f} (bound {BOUND})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
