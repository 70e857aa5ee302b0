#!/usr/bin/python3
"""Summary table and figure from mhc-bench's JSON (with torch_eager.py's figures merged).

    /usr/bin/python3 bench/plot.py --json docs/bench-results.json --png docs/performance.png \
        --markdown docs/performance.md

With --markdown, the file's table between the lines MARKDOWN_BEGIN and MARKDOWN_END is
replaced by this run's, stamped with its host, commit and date.

Left panel: fraction of the roofline bound reached, per shape and operator, with the
75 % target line (hatched bars: cache-resident working sets, where the DRAM bound does
not bind). Right panel: time of forward + backward per shape, log scale: PyTorch eager,
our Python face (functional and autograd, end to end) and mhc-bench (C++, pre-touched
outputs).
"""
import argparse
import json
import os

TARGET_FRACTION = 0.75
MARKDOWN_BEGIN = "<!-- mhc-bench table: made by bench/plot.py --markdown; do not edit by hand -->"
MARKDOWN_END = "<!-- mhc-bench table: end -->"


def fmt(v, spec="8.2f", none="-"):
    return format(v, spec) if v is not None else format(none, ">" + spec.split(".")[0])


def operator_rows(res):
    """(case, "forward" or "backward", its result) for every timed operator of the run."""
    for case in res["cases"]:
        for op in ("forward", "backward"):
            if case.get(op):
                yield case, op, case[op]


def extra_bytes(r):
    """(peak RSS over the baseline, or the counted peak where RSS is unknown; planned workspace)."""
    extra = r["extra_memory"]
    rss = extra.get("peak_rss_bytes")
    return (rss if rss is not None else extra.get("counted_peak_bytes")), extra.get("expected_workspace_bytes")


def summary_table(res):
    m = res["machine"]
    roof = m["roofline"]
    lines = [
        f"mhc {res['mhc_version']}  kernels {res['isa']}  threads {res['threads']}  ({res['date_utc']})",
        f"cpu {m['cpu']}; roofline: {roof['peak_gflops']:.1f} GFLOP/s ({roof['peak_isa']} FMA peak), "
        f"{roof['bandwidth_gbs']:.1f} GB/s (triad)",
        "",
        f"{'shape':6}{'op':9}{'ms':>9}{'GB/s':>8}{'GFLOP/s':>9}{'bound ms':>10}{'by':>5}"
        f"{'roofline':>9}{'1->n':>7}{'extra MiB':>10}{'ws MiB':>8}",
    ]
    for case, op, r in operator_rows(res):
        rss, ws = extra_bytes(r)
        mark = "c" if r.get("cache_resident") else " "
        lines.append(
            f"{case['shape']:6}{op:9}{r['time_ms']:9.3f}{r['gbytes_per_s']:8.2f}{r['gflops_per_s']:9.1f}"
            f"{r['roofline_bound_ms']:10.3f}{r['bound_by'][:3]:>5}{100 * r['roofline_fraction']:8.1f}%{mark}"
            f"{fmt(r.get('speedup_vs_1_thread'), '6.2f')}x"
            f"{fmt(rss and rss / 2**20, '10.2f')}{fmt(ws and ws / 2**20, '8.2f')}")
    pt = res.get("pytorch")
    if pt:
        blas = pt["blas"]
        lines += [
            "",
            f"PyTorch {pt['torch_version']} eager, {pt['threads']} threads, BLAS {blas['name']} "
            f"({blas.get('openblas_corename', '?')}); ours: mhc {pt['mhc_isa']}, {pt['mhc_threads']} threads",
            f"{'shape':6}{'eager f+b':>11}{'ours f+b':>10}{'autograd':>10}{'C++ f+b':>10}"
            f"{'eager/ours':>12}{'eager/autograd':>16}{'cold f+b':>10}{'eager/cold':>11}"
            "   (ms; ours = Python face, end to end; cold = without its output cache)",
        ]
        cpp = {c["shape"]: c for c in res["cases"]}
        for c in pt["cases"]:
            e, o, a = c["eager"], c["ours_functional"], c.get("ours_autograd")
            total = lambda r: r["forward_ms"] + (r["backward_ms"] or 0) if r else None  # noqa: E731
            cc = cpp.get(c["shape"])
            cxx = None
            if cc:
                cxx = cc["forward"]["time_ms"] + (cc["backward"]["time_ms"] if "backward" in cc else 0)
            ra = c.get("ratio_eager_over_ours_autograd")
            lines.append(
                f"{c['shape']:6}{fmt(total(e), '11.2f')}{fmt(total(o), '10.2f')}{fmt(total(a), '10.2f')}"
                f"{fmt(cxx, '10.2f')}{c['ratio_eager_over_ours']:11.2f}x"
                f"{fmt(ra, '15.2f')}{'x' if ra else ' '}"
                f"{fmt(c.get('ours_functional_cold_total_ms'), '10.2f')}"
                f"{fmt(c.get('ratio_eager_over_ours_cold'), '10.2f')}{'x' if c.get('ratio_eager_over_ours_cold') else ''}"
                f"   (runs {c['runs']})")
    return "\n".join(lines)


def plot(res, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_roof, ax_time) = plt.subplots(1, 2, figsize=(13, 5))
    labels, values, cached, colors = [], [], [], []
    for case in res["cases"]:
        for op, color in (("forward", "#4C72B0"), ("backward", "#DD8452")):
            r = case.get(op)
            if r:
                labels.append(f"{case['shape']}\n{'fwd' if op == 'forward' else 'bwd'}")
                values.append(100 * r["roofline_fraction"])
                cached.append(r.get("cache_resident", False))
                colors.append(color)
    ymax = max([110.0] + [min(v, 400.0) * 1.15 for v in values])
    bars = ax_roof.bar(range(len(values)), [min(v, ymax) for v in values], color=colors,
                       edgecolor="black", linewidth=0.5)
    for bar, v, c in zip(bars, values, cached):
        if c:
            bar.set_hatch("//")
        ax_roof.annotate(f"{v:.0f}%", (bar.get_x() + bar.get_width() / 2, min(v, ymax)),
                         ha="center", va="bottom", fontsize=8)
    from matplotlib.patches import Patch
    target = ax_roof.axhline(100 * TARGET_FRACTION, color="green", linestyle="--", label="75 % target")
    ax_roof.axhline(100, color="gray", linestyle=":", linewidth=1)
    ax_roof.set_xticks(range(len(labels)), labels, fontsize=8)
    ax_roof.set_ylim(0, ymax)
    ax_roof.set_ylabel("roofline bound / measured time (%)")
    ax_roof.set_title(f"Fraction of the roofline (kernels {res['isa']}, {res['threads']} threads)\n"
                      "hatched: cache-resident working set", fontsize=10)
    ax_roof.legend(handles=[target, Patch(color="#4C72B0", label="forward"),
                            Patch(color="#DD8452", label="backward")], loc="upper left", fontsize=8)

    shapes = [c["shape"] for c in res["cases"]]
    series = {"mhc-bench C++": {}}
    for c in res["cases"]:
        series["mhc-bench C++"][c["shape"]] = c["forward"]["time_ms"] + (
            c["backward"]["time_ms"] if "backward" in c else 0)
    pt = res.get("pytorch")
    if pt:
        for key, name in (("eager", "PyTorch eager"), ("ours_functional", "ours, Python functional"),
                          ("ours_autograd", "ours, Python autograd")):
            series[name] = {c["shape"]: c[key]["forward_ms"] + (c[key]["backward_ms"] or 0)
                            for c in pt["cases"] if key in c}
    order = [n for n in ("PyTorch eager", "ours, Python functional", "ours, Python autograd",
                         "mhc-bench C++") if n in series]
    width = 0.8 / len(order)
    for i, name in enumerate(order):
        xs = [j + (i - (len(order) - 1) / 2) * width for j, s in enumerate(shapes) if s in series[name]]
        ys = [series[name][s] for s in shapes if s in series[name]]
        ax_time.bar(xs, ys, width=width, label=name, edgecolor="black", linewidth=0.5)
    ax_time.set_yscale("log")
    ax_time.set_xticks(range(len(shapes)),
                       [f"{c['shape']}: T={c['T']} N={c['N']}\nD={c['D']} {c['dtype']}"
                        + ("" if "backward" in c else "\n(fwd only)") for c in res["cases"]], fontsize=8)
    ax_time.set_ylabel("forward + backward time (ms, log)")
    ax_time.set_title("Time per shape: PyTorch eager vs mhc", fontsize=10)
    ax_time.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png)), exist_ok=True)
    fig.savefig(png, dpi=110)


def markdown_table(res):
    """This run's operator rows as a Markdown table, stamped with host, commit and date."""
    m = res["machine"]
    roof = m["roofline"]
    lines = [
        f"Host: {m['cpu']}, {res['threads']} threads; kernels `{res['isa']}`; mhc {res['mhc_version']} "
        f"at commit {res.get('commit', 'unknown')}; {res['date_utc']}. Roofline of this run: "
        f"{roof['peak_gflops']:.1f} GFLOP/s ({roof['peak_isa']} FMA peak), {roof['bandwidth_gbs']:.1f} GB/s "
        "(triad).",
        "",
        "| shape | op | ms | 1→n | GB/s | GFLOP/s | bound ms (by) | roofline | extra MiB: RSS / planned ws |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, op, r in operator_rows(res):
        rss, ws = extra_bytes(r)
        speedup = r.get("speedup_vs_1_thread")
        lines.append(
            f"| {case['shape']} | {op} | {r['time_ms']:.3f} | {'-' if speedup is None else f'{speedup:.2f}x'} | "
            f"{r['gbytes_per_s']:.2f} | {r['gflops_per_s']:.1f} | {r['roofline_bound_ms']:.3f} ({r['bound_by']}) | "
            f"{100 * r['roofline_fraction']:.1f} %{' (cache)' if r.get('cache_resident') else ''} | "
            f"{'-' if rss is None else f'{rss / 2**20:.2f}'} / {'-' if ws is None else f'{ws / 2**20:.2f}'} |")
    return "\n".join(lines)


def update_markdown(path, res):
    """Replaces the table between MARKDOWN_BEGIN and MARKDOWN_END in `path` by this run's."""
    with open(path) as f:
        text = f.read()
    begin, end = text.find(MARKDOWN_BEGIN), text.find(MARKDOWN_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"plot.py: {path} has no {MARKDOWN_BEGIN!r} ... {MARKDOWN_END!r} section")
    text = text[:begin + len(MARKDOWN_BEGIN)] + "\n" + markdown_table(res) + "\n" + text[end:]
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default="bench-results.json")
    ap.add_argument("--png", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs",
                                                  "performance.png"))
    ap.add_argument("--markdown", help="a Markdown file whose mhc-bench table section to replace")
    args = ap.parse_args()
    with open(args.json) as f:
        res = json.load(f)
    print(summary_table(res))
    plot(res, args.png)
    print(f"\nfigure: {os.path.normpath(args.png)}")
    if args.markdown:
        update_markdown(args.markdown, res)
        print(f"table: {os.path.normpath(args.markdown)}")


if __name__ == "__main__":
    main()
