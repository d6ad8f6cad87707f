"""The Markdown tables (and the sweep plot) of `attention_speed.py`.

With the default options the attention, core, dense, sweep and LiteRT
tables are those quoted in docs/performance.md. `--forms` with more
than `auto` adds one `<form> / limit` column per further form (the first
form is the `ours` columns); `--memory` adds the peak resident memory of
ours (one value per form, in `--forms` order) and of the limit.
"""

SWEEP_COLUMNS = ("limit", "ours real", "native real", "ours abs", "native abs")
SWEEP_LABELS = dict(
    zip(
        SWEEP_COLUMNS,
        (
            "limit: real MHA, 2x width",
            "CAtt ip (ours)",
            "CAtt ip (native complex64)",
            "APAtt ip (ours)",
            "APAtt ip (native complex64)",
        ),
    )
)


def pass_name(pass_):
    return "fwd" if pass_ == "forward" else "fwd+bwd"


def _jit(row):
    return "on" if row["jit"] else "off"


def _forms(rows):
    """The forms timed (in `--forms` order) and whether to name them."""
    forms = list(rows[0]["forms"]) if rows else ["auto"]
    return forms, forms != ["auto"]


def _ours(label, forms, named):
    return f"ours, {forms[0]} {label}" if named else f"ours {label}"


def _form_cells(row, forms, key):
    """` a | b |` of the ratios `key` of the forms after the first."""
    return "".join(f" {row['forms'][f][key]:.2f} |" for f in forms[1:])


def _memory_headers(rows, forms):
    if not rows or "memory" not in rows[0]:
        return "", ""
    label = "ours" if len(forms) == 1 else "ours, " + " / ".join(forms)
    return (
        f" peak RSS {label} (MiB) | peak RSS limit (MiB) |",
        "| ---: | ---: ",
    )


def _mib(result):
    if "peak_mib" in result:
        return f"{result['peak_mib']:.0f}"
    return "error"


def _memory_cells(row, forms):
    if "memory" not in row:
        return ""
    memory = row["memory"]
    ours = " / ".join(_mib(memory["ours"][f]) for f in forms)
    return f" {ours} | {_mib(memory['limit'])} |"


def print_attention_table(rows, causal):
    forms, named = _forms(rows)
    memory_header, memory_rule = _memory_headers(rows, forms)
    print(
        "\n## ComplexMultiHeadAttention vs the limit (real MHA, 2 x key_dim) "
        f"and native complex64{' (causal mask)' if causal else ''}\n"
    )
    print(
        f"| shape | pass | jit | variant | {_ours('(ms)', forms, named)} | "
        f"limit (ms) | native (ms) | {_ours('/ limit', forms, named)} |"
        + "".join(f" {f} / limit |" for f in forms[1:])
        + " native / ours | target | met |"
        + memory_header
    )
    print(
        "| --- " * 4
        + "| ---: " * (5 + len(forms) - 1)
        + "| --- | --- "
        + memory_rule
        + "|"
    )
    for r in rows:
        target = f"≤ {r['target_vs_limit']}"
        if r["target_speedup"]:
            target += f", ≥ {r['target_speedup']:g}×"
        print(
            f"| {r['shape']} | {pass_name(r['pass_'])} | "
            f"{_jit(r)} | {r['variant']} | "
            f"{r['ours_ms']:.2f} | {r['limit_ms']:.2f} | "
            f"{r['native_ms']:.2f} | {r['vs_limit']:.2f} |"
            + _form_cells(r, forms, "vs_limit")
            + f" {r['native_over_ours']:.2f} | {target} | "
            f"{'yes' if r['met'] else 'no'} |" + _memory_cells(r, forms)
        )


def print_core_table(rows, causal):
    forms, named = _forms(rows)
    memory_header, memory_rule = _memory_headers(rows, forms)
    print(
        "\n## Attention core alone (projected per-head q, k, v): "
        "complex_dot_product_attention vs keras.ops.dot_product_attention "
        f"of width 2H, over S and 2S keys{' (causal mask)' if causal else ''}"
        "\n"
    )
    print(
        f"| shape | pass | jit | variant | {_ours('(ms)', forms, named)} | "
        "limit (ms) | floor, 2S keys (ms) | native (ms) | "
        f"{_ours('/ limit', forms, named)} |"
        + "".join(f" {f} / limit |" for f in forms[1:])
        + " ours / floor | native / ours |"
        + memory_header
    )
    print("| --- " * 4 + "| ---: " * (7 + len(forms) - 1) + memory_rule + "|")
    for r in rows:
        print(
            f"| {r['shape']} | {pass_name(r['pass_'])} | "
            f"{_jit(r)} | {r['variant']} | "
            f"{r['ours_ms']:.2f} | {r['limit_ms']:.2f} | "
            f"{r['floor_ms']:.2f} | {r['native_ms']:.2f} | "
            f"{r['vs_limit']:.2f} |"
            + _form_cells(r, forms, "vs_limit")
            + f" {r['vs_floor']:.2f} | {r['native_over_ours']:.2f} |"
            + _memory_cells(r, forms)
        )


def print_dense_table(rows):
    forms, named = _forms(rows)
    print(
        "\n## ComplexDense(E) vs real Dense(2E) on the same (B, T, 2E) "
        "input, and native complex64 matmul\n"
    )
    print(
        f"| shape | pass | jit | {_ours('(ms)', forms, named)} | "
        f"real Dense (ms) | native (ms) | {_ours('/ real', forms, named)} |"
        + "".join(f" {f} / real |" for f in forms[1:])
        + " native / ours | target | met |"
    )
    print(
        "| --- | --- | --- | ---: | ---: | ---: | ---: | "
        + "---: | " * (len(forms) - 1)
        + "---: | --- | --- |"
    )
    for r in rows:
        print(
            f"| {r['shape']} (B·T={r['tokens']}, E={r['features']}) "
            f"| {pass_name(r['pass_'])} "
            f"| {_jit(r)} | {r['ours_ms']:.3f} | "
            f"{r['real_ms']:.3f} | {r['native_ms']:.3f} | "
            f"{r['vs_real']:.2f} |"
            + _form_cells(r, forms, "vs_real")
            + f" {r['native_over_ours']:.2f} | ≤ {r['target']:g} | "
            f"{'yes' if r['met'] else 'no'} |"
        )


def print_sweep_table(rows):
    jit = "on" if rows and rows[0]["jit"] else "off"
    print(
        "\n## Scaling with T: forward, batch 1, E = 128, 4 heads, "
        f"jit {jit} (ms)\n"
    )
    print(
        "| T | "
        + " | ".join(SWEEP_LABELS[c] for c in SWEEP_COLUMNS)
        + " | CAtt / limit | APAtt / limit |"
    )
    print("| ---: " * (len(SWEEP_COLUMNS) + 3) + "|")
    for r in rows:
        cells = " | ".join(f"{r[c]:.2f}" for c in SWEEP_COLUMNS)
        print(
            f"| {r['length']} | {cells} | {r['ours real / limit']:.2f} "
            f"| {r['ours abs / limit']:.2f} |"
        )


def plot_sweep(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "\n(matplotlib is not installed: skipping the sweep plot; the "
            "table above holds the same numbers.)"
        )
        return None
    lengths = [r["length"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for column in SWEEP_COLUMNS:
        style = "--" if column.startswith("native") else "-"
        ax.loglog(
            lengths,
            [r[column] for r in rows],
            style,
            marker="o",
            label=SWEEP_LABELS[column],
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("forward time (ms)")
    ax.set_title("Complex attention, batch 1, E = 128, 4 heads")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nSaved the sweep plot to {path}")
    return path


def print_tflite_table(rows):
    print(
        "\n## LiteRT latency, batch 1, T = 64, E = 320 complex (640 real "
        "channels), 8 heads\n"
    )
    print("| model | size (KiB) | median latency (ms) | builtin only |")
    print("| --- | ---: | ---: | --- |")
    for r in rows:
        print(
            f"| {r['model']} | {r['size_kib']:.0f} | "
            f"{r['median_latency_ms']:.3f} | {r['builtin_only']} |"
        )
    if len(rows) == 2:
        ratio = rows[0]["median_latency_ms"] / rows[1]["median_latency_ms"]
        print(f"\nCAtt / real: {ratio:.2f}")


def print_reference_table(rows, info, causal):
    forms, named = _forms(rows)
    print(
        "\n## ComplexMultiHeadAttention vs the authors' PyTorch "
        f"MultiheadAttention (torch {info['torch']}, CPU, "
        f"{info['threads']} threads){' (causal mask)' if causal else ''}\n"
    )
    print(
        f"| shape | pass | jit | variant | {_ours('(ms)', forms, named)} | "
        "reference (ms) | ours / reference | reference / ours |"
    )
    print("| --- " * 4 + "| ---: " * 4 + "|")
    for r in rows:
        print(
            f"| {r['shape']} | {pass_name(r['pass_'])} | {_jit(r)} | "
            f"{r['variant']} | {r['ours_ms']:.2f} | "
            f"{r['reference_ms']:.2f} | {r['vs_reference']:.2f} | "
            f"{r['reference_over_ours']:.2f}× |"
        )
