"""A training loop whose batches change every step: the decision cache and the cost of bucketing.

The 26 Criteo tables (capped at 100 000 rows, D 64, fp32, dense gradients); each step draws the
longest bag length L in 2..20 (bag lengths are uniform in 1..L, so the step's mean length varies
from 1.5 to 10.5) and, per table, a number of bags uniform in 2048..8192; forward and backward
through the default wrapper. Reports:
  * the decision cache's hit rate after the warm-up steps (dispatch.cache_info()), beside the rate
    the model's bucket keys predict for the same calls, and the number of distinct buckets;
  * the regret of deciding per bucket instead of per exact problem: (a) predicted by the model,
    over distinct exact problems of the loop (sampled); (b) measured for the sampled forward
    problems whose bucket choice and exact choice differ: both configs forced and timed.

    python bench/embedding_bag/varying_loop.py [--loop-steps 1000] [--device cpu --smoke]
"""
from __future__ import annotations

import math
import random
import statistics
import time

import torch

# harness first: it puts this checkout on sys.path
from harness import candidate_fn, candidate_name, check, criteo_tables, median_ms, random_bags, sync
import mymetaops
from mymetaops import model
from mymetaops.ops import dispatch

NAME = "varying_loop"
DIM = 64
BAGS_RANGE, SMOKE_BAGS_RANGE = (2048, 8192), (16, 64)
MAX_LEN_RANGE = (2, 20)
REQUIRED_HIT_RATE = 0.99
REQUIRED_REGRET = 0.01
FORWARD = "embedding_bag"


def add_arguments(parser):
    parser.add_argument("--loop-steps", type=int, default=1000, help="varying loop: steps")
    parser.add_argument("--warmup-steps", type=int, default=100,
                        help="varying loop: steps before the hit rate is counted")
    parser.add_argument("--regret-problems", type=int, default=2000,
                        help="varying loop: distinct problems sampled for the predicted regret (the "
                             "model takes a few ms per problem)")
    parser.add_argument("--measured-problems", type=int, default=20,
                        help="varying loop: differing problems timed on the device")


def meta_problem(num_rows, num_bags, num_indices):
    """The model's problem of a default-wrapper call (torch-form offsets, fp32, int64, sum)."""
    meta = dict(device="meta", dtype=torch.int64)
    return model.family_of(FORWARD).problem_from_call(
        FORWARD, torch.empty(num_indices, **meta), torch.empty(num_rows, DIM, device="meta"),
        torch.empty(num_bags, **meta), mode="sum")


def training_loop(tables, steps, warmup, bags_range, device):
    """Run the loop; (calls as (table, bags, indices), cache_info after the warm-up, at half way and
    at the end, ms per step after the warm-up)."""
    host = torch.Generator().manual_seed(1)
    indices_generator = torch.Generator(device=device).manual_seed(1)
    calls, snapshots = [], {}
    dispatch.cache_clear()
    for step in range(steps):
        if step == warmup:
            sync(device)
            start = time.perf_counter()
        if step in (warmup, steps // 2):
            snapshots[step] = dispatch.cache_info()
        max_len = int(torch.randint(MAX_LEN_RANGE[0], MAX_LEN_RANGE[1] + 1, (), generator=host))
        outs = []
        for t, w in enumerate(tables):
            num_bags = int(torch.randint(bags_range[0], bags_range[1] + 1, (), generator=host))
            indices, offsets = random_bags(w.shape[0], num_bags, max_len, host, device, indices_generator)
            outs.append(mymetaops.embedding_bag(indices, w, offsets, mode="sum"))
            calls.append((t, num_bags, indices.numel()))
        for w in tables:
            w.grad = None
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    sync(device)
    ms_per_step = (time.perf_counter() - start) * 1e3 / (steps - warmup)
    mymetaops.check_errors()
    return calls, snapshots[warmup], snapshots[steps // 2], dispatch.cache_info(), ms_per_step


def hit_rate(since, end):
    """The decision cache's hit rate between two cache_info()s; None where nothing was looked up
    (no GPU dispatch: the CPU kernels)."""
    hits, misses = end["hits"] - since["hits"], end["misses"] - since["misses"]
    return hits / (hits + misses) if hits + misses else None


def predicted_hit_rate(tables, calls, warmup_calls):
    """(hit rate after warm-up that the model's bucket keys predict for the forward calls, distinct
    forward buckets)."""
    family, seen, misses = model.family_of(FORWARD), set(), 0
    for n, (t, num_bags, num_indices) in enumerate(calls):
        key = family.bucket_key(FORWARD, meta_problem(tables[t].shape[0], num_bags, num_indices))
        misses += n >= warmup_calls and key not in seen
        seen.add(key)
    return 1 - misses / (len(calls) - warmup_calls), len(seen)


def same_candidate(decision, candidate):
    return next((c for c in decision.candidates
                 if c.backend == candidate.backend and c.config == candidate.config), None)


def predicted_regrets(tables, problems, hw, native):
    """Per op, the model's regret of each problem: the bucket choice's predicted time at the exact
    problem / the exact choice's - 1 (steady state, as mymetaops.model.regret); and the forward
    problems whose two choices differ."""
    family, regrets, differing = model.family_of(FORWARD), {}, []
    backend = mymetaops.current_backend()
    for t, num_bags, num_indices in problems:
        problem = meta_problem(tables[t].shape[0], num_bags, num_indices)
        for op, p in [(FORWARD, problem)] + family.backward_ops(FORWARD, problem):
            b = model.decide_bucketed(op, p, hw, backend, native)
            bucket, exact = b.decision.choice, b.exact.choice
            at_exact = same_candidate(b.exact, bucket)  # None: not offered there (as model.regret: inf)
            regret = math.inf if at_exact is None else at_exact.time_us / exact.time_us - 1
            regrets.setdefault(op, []).append(regret)
            if op == FORWARD and (bucket.backend, bucket.config) != (exact.backend, exact.config):
                differing.append(((t, num_bags, num_indices), bucket, exact, regret))
    return regrets, differing


def bags_of(num_bags, num_indices, num_rows, g, device):
    """(indices, offsets): num_indices uniform rows split at random into num_bags non-empty bags."""
    cuts = torch.randperm(num_indices - 1, generator=g)[:num_bags - 1] + 1
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), cuts.sort().values])
    return torch.randint(0, num_rows, (num_indices,), generator=g).to(device), offsets.to(device)


def measured_regrets(tables, differing, count, quick, device):
    """Time the bucket's and the exact problem's choice on `count` of the differing problems: two
    passes in alternating order, each config keeping its best median."""
    g, rows = torch.Generator().manual_seed(2), []
    for (t, num_bags, num_indices), bucket, exact, predicted in random.Random(2).sample(
            differing, min(count, len(differing))):
        weight = tables[t].detach()
        indices, offsets = bags_of(num_bags, num_indices, weight.shape[0], g, device)
        fns = {"bucket": candidate_fn(bucket, weight, indices, offsets),
               "exact": candidate_fn(exact, weight, indices, offsets)}
        ms = {}
        for order in (("bucket", "exact"), ("exact", "bucket")):
            for which in order:
                ms[which] = min(ms.get(which, float("inf")), median_ms(fns[which], device, quick))
        rows.append(dict(rows=weight.shape[0], bags=num_bags, indices=num_indices,
                         bucket_choice=candidate_name(bucket), exact_choice=candidate_name(exact),
                         bucket_ms=ms["bucket"], exact_ms=ms["exact"], predicted=predicted,
                         measured=ms["bucket"] / ms["exact"] - 1))
    return rows


def run(args, device):
    steps, warmup = (12, 4) if args.smoke else (args.loop_steps, args.warmup_steps)
    if not 0 < warmup < steps // 2:
        raise ValueError(f"varying loop: need 0 < warm-up steps ({warmup}) < half the steps ({steps})")
    tables = [w.requires_grad_() for w in criteo_tables(device, DIM, smoke=args.smoke)]
    calls, after_warmup, half_way, end, ms_per_step = training_loop(
        tables, steps, warmup, SMOKE_BAGS_RANGE if args.smoke else BAGS_RANGE, device)
    predicted_hits, buckets = predicted_hit_rate(tables, calls, warmup * len(tables))

    if device.type == "cuda":
        hw, native = model.detect_hardware(device), dispatch.native_available()
    else:  # smoke runs: the H200's decisions, native kernels included, exercise every path
        hw, native = model.get_hardware("H200"), True
    distinct = sorted(set(calls))
    sample = random.Random(0).sample(distinct, min(args.regret_problems, len(distinct)))
    regrets, differing = predicted_regrets(tables, sample, hw, native)
    measured = measured_regrets(tables, differing, args.measured_problems, args.quick or args.smoke, device)
    # Problems whose two choices agree have no regret: the loop's mean regret is the mean over the
    # differing ones (measured on a sample of them) times their share.
    differing_mean = statistics.fmean(r["measured"] for r in measured) if measured else 0.0
    summary = dict(
        steps=steps, warmup_steps=warmup, calls=len(calls), ms_per_step=ms_per_step,
        cache_after_warmup=after_warmup, cache_half_way=half_way, cache_end=end,
        hit_rate=hit_rate(after_warmup, end), hit_rate_second_half=hit_rate(half_way, end),
        predicted_hit_rate=predicted_hits, forward_buckets=buckets, distinct_problems=len(distinct),
        sampled_problems=len(sample), differing_forward=len(differing), hardware=hw.name,
        predicted_regret={op: dict(mean=statistics.fmean(r), max=max(r),
                                   share_over_1pct=sum(x > 0.01 for x in r) / len(r))
                          for op, r in regrets.items()},
        measured_differing_mean=differing_mean,
        measured_max=max((r["measured"] for r in measured), default=0.0),
        measured_mean=differing_mean * len(differing) / len(sample))
    checks = []
    if summary["hit_rate"] is None:
        checks.append(dict(name="decision-cache hit rate after warm-up", value=None,
                           shown="n/a (no GPU dispatch)", required=f">= {REQUIRED_HIT_RATE:.0%}",
                           passed=None))
    else:
        checks.append(check("decision-cache hit rate after warm-up", summary["hit_rate"], REQUIRED_HIT_RATE,
                            at_most=False, fmt="{:.2%}"))
    for op, r in summary["predicted_regret"].items():
        checks.append(check(f"predicted mean regret of bucketing, {op}", r["mean"], REQUIRED_REGRET,
                            at_most=True, fmt="{:.3%}"))
    checks.append(check("measured mean regret of bucketing, forward", summary["measured_mean"],
                        REQUIRED_REGRET, at_most=True, fmt="{:.3%}"))
    return dict(name=NAME, summary=summary, measured=measured, checks=checks,
                markdown=markdown(summary, measured))


def markdown(s, measured):
    def rate(r):
        return "n/a" if r is None else f"{r:.2%}"
    lines = [f"## Training loop with varying batches ({s['steps']} steps of 26 tables, forward+backward, "
             f"default wrapper; {s['ms_per_step']:.2f} ms/step including input generation)", "",
             f"- decision-cache hit rate after {s['warmup_steps']} warm-up steps: {rate(s['hit_rate'])} "
             f"(over the second half: {rate(s['hit_rate_second_half'])}; cache at the end: {s['cache_end']}); "
             f"the model's bucket keys predict {s['predicted_hit_rate']:.2%} for the forward calls; "
             f"{s['forward_buckets']} distinct forward buckets over {s['calls']} forward calls",
             f"- predicted regret of deciding per bucket ({s['hardware']}), over {s['sampled_problems']} "
             f"sampled of {s['distinct_problems']} distinct exact problems:"]
    for op, r in s["predicted_regret"].items():
        lines.append(f"  - {op}: mean {r['mean']:.3%}, max {r['max']:.2%}, "
                     f"{r['share_over_1pct']:.1%} of problems over 1%")
    lines.append(f"- measured regret (forward): the bucket's and the exact choice differ on {s['differing_forward']} "
                 f"of the {s['sampled_problems']} problems; on the {len(measured)} timed: mean "
                 f"{s['measured_differing_mean']:+.2%}, max {s['measured_max']:+.2%}; over all the sampled "
                 f"problems: {s['measured_mean']:+.3%}")
    if measured:
        lines += ["", "| rows | bags | indices | bucket choice (ms) | exact choice (ms) | predicted | measured |",
                  "|---|---|---|---|---|---|---|"]
        for r in measured:
            lines.append(f"| {r['rows']} | {r['bags']} | {r['indices']} | {r['bucket_choice']} "
                         f"({r['bucket_ms']:.4f}) | {r['exact_choice']} ({r['exact_ms']:.4f}) | "
                         f"{r['predicted']:+.2%} | {r['measured']:+.2%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import run_all
    run_all.main(only=[NAME])
