"""FP8 training check: the same MLP trained twice, from the same init on the same data, with
torch.nn.Linear (bf16) and with mymetaops.nn.Fp8Linear, and the two loss curves compared.

Task: regression onto a fixed random teacher (512 -> 256 tanh -> 1, fp32, output scaled to unit
variance), inputs N(0, 1), a fresh batch per step from one seeded generator (the same batches in
both runs). Student: 512 -> 1024 -> 1024 -> 512 -> 1 with ReLU, bf16 parameters, Adam, MSE in fp32.
The three hidden layers are Fp8Linear in the FP8 run; the 512 -> 1 head stays nn.Linear in both
(Fp8Linear needs out_features % 16 == 0; a high-precision head is common FP8 practice).

Writes <prefix>.json (both curves, final losses, the gap), <prefix>.png (matplotlib) or .svg (drawn
by hand when matplotlib is missing) and <prefix>.md; prefix bench/results/<date>-<gpu>-fp8-training.
Reports the final losses (mean of the last 10 steps) and the max relative gap |fp8 - bf16| / bf16
over the last 50 steps (per step, and of the 10-step moving averages).

    python bench/gemm/train_mlp.py [--steps 300] [--batch 4096] [--budget-s 90] [--out PREFIX]
    python bench/gemm/train_mlp.py --dry-run   # CPU: 20 steps, batch 256 (Fp8Linear on the CPU kernels)
"""
from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_harness import add_device_arguments, check, checks_markdown, meta_line, report_main, sync  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import mymetaops  # noqa: E402

NAME = "train_mlp"
WIDTHS = (512, 1024, 1024, 512, 1)
TAIL = 50
GAP_BOUND = None  # reported; no bound set by the issue


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=90.0, help="both runs together")
    parser.add_argument("--svg", action="store_true", help="draw the SVG even if matplotlib is importable")
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-fp8-training)")


def student(device, seed):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(WIDTHS) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device=device, dtype=torch.bfloat16)


def to_fp8(net):
    """A copy of `net` whose hidden Linear layers are Fp8Linear (same values, own parameters)."""
    net = copy.deepcopy(net)
    linears = [i for i, m in enumerate(net) if isinstance(m, torch.nn.Linear)]
    for i in linears[:-1]:
        net[i] = mymetaops.nn.Fp8Linear.from_linear(net[i])
    return net


class Teacher:
    def __init__(self, device, seed):
        g = torch.Generator(device="cpu").manual_seed(seed + 1)
        self.w1 = (torch.randn(256, WIDTHS[0], generator=g) / math.sqrt(WIDTHS[0])).to(device)
        self.w2 = (torch.randn(1, 256, generator=g) / math.sqrt(256)).to(device)
        x = torch.randn(8192, WIDTHS[0], generator=g).to(device)
        self.scale = 1.0
        self.scale = float(self(x).std())

    def __call__(self, x):
        return torch.tanh(x.float() @ self.w1.t()) @ self.w2.t() / self.scale


def train(net, teacher, args, device, steps, deadline):
    g = torch.Generator(device=device).manual_seed(args.seed + 2)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    losses, step_times = [], []
    sync(device)
    t0 = time.perf_counter()
    done = 0
    for step in range(steps):
        x = torch.randn(args.batch, WIDTHS[0], device=device, generator=g)
        y = teacher(x)
        loss = F.mse_loss(net(x.to(torch.bfloat16)).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
        done = step + 1
        if done % 25 == 0:
            sync(device)
            step_times.append((done, time.perf_counter() - t0))
            if time.monotonic() > deadline:
                break
    sync(device)
    wall = time.perf_counter() - t0
    return [float(v) for v in torch.stack(losses).cpu()], done, wall, step_times


def moving_average(values, n=10):
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= n:
            acc -= values[i - n]
        out.append(acc / min(i + 1, n))
    return out


def run(args, device):
    if args.dry_run:
        args.steps, args.batch = min(args.steps, 12), min(args.batch, 128)
    started = time.monotonic()
    teacher = Teacher(device, args.seed)
    base = student(device, args.seed)
    fp8_net = to_fp8(base)
    bf16_net = copy.deepcopy(base)
    # bf16 first, with half the budget; the FP8 run then takes the same number of steps.
    bf16, steps, bf16_wall, bf16_times = train(bf16_net, teacher, args, device, args.steps,
                                               started + args.budget_s / 2)
    fp8, steps8, fp8_wall, fp8_times = train(fp8_net, teacher, args, device, steps, started + args.budget_s)
    n = min(steps, steps8)
    bf16, fp8 = bf16[:n], fp8[:n]
    tail = max(1, min(TAIL, n))
    gaps = [abs(a - b) / b for a, b in zip(fp8[-tail:], bf16[-tail:])]
    ma16, ma8 = moving_average(bf16), moving_average(fp8)
    ma_gaps = [abs(a - b) / b for a, b in zip(ma8[-tail:], ma16[-tail:])]
    final16, final8 = sum(bf16[-10:]) / len(bf16[-10:]), sum(fp8[-10:]) / len(fp8[-10:])
    result = dict(name=NAME, steps=n, steps_requested=args.steps, batch=args.batch, lr=args.lr, seed=args.seed,
                  widths=WIDTHS, loss_bf16=bf16, loss_fp8=fp8, final_loss_bf16=final16, final_loss_fp8=final8,
                  initial_loss=bf16[0], max_rel_gap_last50=max(gaps), mean_rel_gap_last50=sum(gaps) / len(gaps),
                  max_rel_gap_last50_moving_avg=max(ma_gaps),
                  ms_per_step_bf16=1e3 * bf16_wall / max(1, steps), ms_per_step_fp8=1e3 * fp8_wall / max(1, steps8),
                  progress_bf16=bf16_times, progress_fp8=fp8_times, elapsed_s=time.monotonic() - started)
    result["checks"] = [
        check("FP8 training: final loss (mean of last 10 steps), Fp8Linear / nn.Linear bf16", final8 / final16, None,
              at_most=True, fmt="{:.3f}"),
        check(f"FP8 training: max relative loss gap over the last {tail} steps", max(gaps), GAP_BOUND, at_most=True,
              fmt="{:.3f}"),
        check("FP8 training: loss fell (final / initial, FP8 run)", final8 / fp8[0], 0.5 if n >= 100 else None,
              at_most=True, fmt="{:.3f}"),
    ]
    return result


# --- plots -------------------------------------------------------------------------------------------

def plot_png(path: Path, result, title) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 5))
        steps = range(1, result["steps"] + 1)
        ax.plot(steps, result["loss_bf16"], label="torch.nn.Linear (bf16)", lw=1.2)
        ax.plot(steps, result["loss_fp8"], label="mymetaops.nn.Fp8Linear", lw=1.2)
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("MSE loss")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return True
    except Exception as e:  # noqa: BLE001  (no matplotlib, or no backend: the SVG instead)
        print(f"matplotlib unavailable ({type(e).__name__}: {e}); drawing an SVG", flush=True)
        return False


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plot_svg(path: Path, result, title) -> None:
    """Both curves on a log-scale y axis, as a hand-written SVG (no dependencies)."""
    width, height, left, right, top, bottom = 820, 500, 70, 20, 40, 50
    series = [("torch.nn.Linear (bf16)", result["loss_bf16"], "#1f77b4"),
              ("mymetaops.nn.Fp8Linear", result["loss_fp8"], "#ff7f0e")]
    values = [v for _, s, _ in series for v in s if v > 0]
    lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    if hi == lo:
        hi = lo + 1
    n = max(2, result["steps"])

    def px(i):
        return left + (width - left - right) * i / (n - 1)

    def py(v):
        return top + (height - top - bottom) * (hi - math.log10(max(v, 10.0 ** lo))) / (hi - lo)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="13">{_esc(title)}</text>']
    for e in range(lo, hi + 1):  # decades
        y = py(10.0 ** e)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    tick = next(t for t in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 10**9) if n / t <= 8)
    for t in [1] + list(range(tick, n + 1, tick)):
        x = px(t - 1)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - bottom}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle">{t}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
               f'fill="none" stroke="black"/>')
    out.append(f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{height / 2}" text-anchor="middle" transform="rotate(-90 16 {height / 2})">'
               f'MSE loss (log scale)</text>')
    for j, (name, s, color) in enumerate(series):
        points = " ".join(f"{px(i):.1f},{py(v):.1f}" for i, v in enumerate(s))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.3" points="{points}"/>')
        y = top + 18 + 18 * j
        out.append(f'<line x1="{width - right - 200}" y1="{y - 4}" x2="{width - right - 175}" y2="{y - 4}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{width - right - 170}" y="{y}">{_esc(name)}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def markdown(meta, result, plot_name) -> str:
    r = result
    lines = [f"# FP8 training check on {meta_line(meta)}", ""] + checks_markdown(r["checks"])
    lines += ["", f"MLP {' -> '.join(map(str, r['widths']))} (ReLU; bf16 params; Adam lr {r['lr']}), batch {r['batch']}, "
                  f"{r['steps']} steps (of {r['steps_requested']} asked), regression onto a fixed random teacher, the same "
                  "init and batches in both runs; the hidden layers Fp8Linear in the FP8 run, the 512 -> 1 head "
                  "nn.Linear in both.", "",
              "| run | initial loss | final loss (mean of last 10) | ms/step |", "|---|---|---|---|",
              f"| torch.nn.Linear (bf16) | {r['loss_bf16'][0]:.4f} | {r['final_loss_bf16']:.4f} | {r['ms_per_step_bf16']:.2f} |",
              f"| mymetaops.nn.Fp8Linear | {r['loss_fp8'][0]:.4f} | {r['final_loss_fp8']:.4f} | {r['ms_per_step_fp8']:.2f} |",
              "", f"Relative gap |fp8 - bf16| / bf16 over the last {min(TAIL, r['steps'])} steps: max "
                  f"{r['max_rel_gap_last50']:.3f}, mean {r['mean_rel_gap_last50']:.3f}; of the 10-step moving averages: "
                  f"max {r['max_rel_gap_last50_moving_avg']:.3f}.", "", f"![loss curves]({plot_name})"]
    return "\n".join(lines) + "\n"


def write_plot(prefix: Path, meta, result, args) -> tuple[str]:
    """The loss curves beside the report (PNG, or SVG without matplotlib or with --svg)."""
    title = f"MLP {'-'.join(map(str, WIDTHS))}, batch {result['batch']}: bf16 vs FP8 ({meta['gpu']})"
    png = Path(f"{prefix}.png")
    if not args.svg and plot_png(png, result, title):
        plot = png
    else:
        plot = Path(f"{prefix}.svg")
        plot_svg(plot, result, title)
    result["plot"] = plot.name
    print(f"written: {plot}")
    return (plot.name,)


def main(argv=None):
    return report_main(argv, __doc__, add_arguments, run, markdown, "fp8-training", extra=write_plot)


if __name__ == "__main__":
    sys.exit(main())
