"""Quickstart: complex-valued attention that denoises radio tones.

A toy complex task: each sample is a complex baseband tone (IQ samples of
e^{i(w n + phi)} with a random frequency and phase) cut into 16 frames of 8
samples and buried in complex Gaussian noise. Every frame of one sample
carries the same tone, so attention across frames can average the noise
away. A small model -- ComplexMultiHeadAttention with a residual connection
and a ComplexDense read-out, the paper's CAtt variant -- learns to recover
the clean frames.

The script prints the tensor shapes, the loss per epoch, the error against
the noisy input, and checks the trained attention layer's output against a
complex128 NumPy computation of the same formula.

Run:  python examples/quickstart.py [--epochs 12] [--softmax real]
      [--save quickstart.keras]
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# cvattn_keras first, before keras imports TensorFlow: it quiets
# TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

import cvattn_keras as cvk  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

# The examples' shared argument checks, beside this file (on sys.path when
# run as a script; added when loaded with runpy, as the tests do).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import _arguments as arguments  # noqa: E402

FRAMES, FRAME_LEN = 16, 8


def make_tones(num, noise, rng):
    """Clean and noisy tones, complex, shape (num, FRAMES, FRAME_LEN)."""
    n = np.arange(FRAMES * FRAME_LEN)
    omega = rng.uniform(-np.pi / 4, np.pi / 4, size=(num, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(num, 1))
    clean = np.exp(1j * (omega * n + phase))
    white = rng.standard_normal(clean.shape) + 1j * rng.standard_normal(
        clean.shape
    )
    noisy = clean + noise * white / np.sqrt(2)
    shape = (num, FRAMES, FRAME_LEN)
    return clean.reshape(shape), noisy.reshape(shape)


def build_model(softmax, product):
    inputs = keras.Input((FRAMES, 2 * FRAME_LEN), name="noisy_frames")
    attention = cvk.layers.ComplexMultiHeadAttention(
        num_heads=4,
        key_dim=8,
        softmax=softmax,
        product=product,
        name="attention",
    )
    x = keras.layers.Add()([inputs, attention(inputs, inputs)])
    outputs = cvk.layers.ComplexDense(FRAME_LEN, name="read_out")(x)
    return keras.Model(inputs, outputs)


def numpy_attention(layer, x):
    """The layer's formula in complex128 NumPy (design.md §3-4)."""

    def project(dense, z):
        w = dense.kernel_real.numpy() + 1j * dense.kernel_imag.numpy()
        b = dense.bias_real.numpy() + 1j * dense.bias_imag.numpy()
        return z @ w + b

    def heads(z):  # (B, T, N*H) -> (B, N, T, H)
        b, t, _ = z.shape
        return z.reshape(b, t, layer.num_heads, -1).transpose(0, 2, 1, 3)

    q = heads(project(layer.query_dense, x))
    k = heads(project(layer.key_dense, x))
    v = heads(project(layer.value_dense, x))
    if layer.product == "bilinear":
        k = np.conj(k)
    scores = layer.scale * q @ np.conj(k).transpose(0, 1, 3, 2)

    def softmax(a):
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    magnitude = np.abs(scores)
    weights = {
        "real": softmax(scores.real),
        "abs": softmax(magnitude) * scores / np.maximum(magnitude, 1e-300),
        "absonly": softmax(magnitude),
        "naive": softmax(scores.real) + 1j * softmax(scores.imag),
    }[layer.softmax]
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(x.shape[0], FRAMES, -1)
    return project(layer.output_dense, out)


def keras_file(text):
    """A type for `--save`: a `.keras` path whose folder exists or can be
    made."""
    problem = arguments.folder_problem(os.path.dirname(text) or ".")
    if problem or not text.endswith(".keras"):
        raise argparse.ArgumentTypeError(
            f"{problem or 'must end in .keras'}. Received: {text!r}"
        )
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=arguments.positive_int, default=12)
    parser.add_argument(
        "--softmax",
        type=arguments.checked_by(cvk.attention.resolve_softmax),
        default="real",
    )
    parser.add_argument(
        "--product",
        type=arguments.checked_by(cvk.attention.resolve_product),
        default="inner",
    )
    parser.add_argument(
        "--noise", type=arguments.non_negative_float, default=1.0
    )
    parser.add_argument("--seed", type=arguments.non_negative_int, default=0)
    parser.add_argument(
        "--save", type=keras_file, default=None, help="save the model (.keras)"
    )
    parser.add_argument("--samples", type=arguments.positive_int, default=2048)
    parser.add_argument(
        "--smoke", action="store_true", help="a seconds-long run (tests)"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs, args.samples = 1, 128
    return args


def main(argv=None):
    args = parse_args(argv)

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    clean, noisy = make_tones(args.samples, args.noise, rng)
    clean_val, noisy_val = make_tones(256, args.noise, rng)
    x, y = cvk.to_stacked(noisy), cvk.to_stacked(clean)
    x_val, y_val = cvk.to_stacked(noisy_val), cvk.to_stacked(clean_val)
    print(
        f"complex input {noisy.shape} {noisy.dtype} -> stacked {x.shape} "
        f"{x.dtype} ([real | imag] on the last axis)"
    )

    model = build_model(args.softmax, args.product)
    model.compile(keras.optimizers.Adam(3e-3), loss="mse")
    model.summary()

    identity_mse = float(np.mean((x_val - y_val) ** 2))
    history = model.fit(
        x,
        y,
        validation_data=(x_val, y_val),
        epochs=args.epochs,
        batch_size=64,
        verbose=2,
    )
    losses = history.history["val_loss"]
    print(
        f"\nvalidation MSE per real channel: epoch 1 {losses[0]:.4f} -> "
        f"epoch {len(losses)} {losses[-1]:.4f}; "
        f"the noisy input itself: {identity_mse:.4f}"
    )
    print(f"noise power reduced {identity_mse / losses[-1]:.1f}x")

    layer = model.get_layer("attention")
    got = cvk.from_stacked(layer(x_val[:8], x_val[:8]), "complex128")
    expected = numpy_attention(layer, noisy_val[:8])
    error = np.max(np.abs(got - expected))
    print(
        f"attention output {got.shape} vs NumPy complex128: "
        f"max abs error {error:.2e}"
    )
    if not error < 1e-4:
        raise SystemExit("attention output does not match NumPy")
    if args.save:
        os.makedirs(os.path.dirname(os.path.abspath(args.save)), exist_ok=True)
        model.save(args.save)
        print(
            f"saved {args.save}; export it with: python -m "
            f"cvattn_keras.export {args.save} model.tflite --verify"
        )
    return error


if __name__ == "__main__":
    main()
