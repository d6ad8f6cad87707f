"""The model, data and weight comparison every distributed worker shares.

Workers are scripts run in subprocesses by tests/test_distribution.py (each
sets KERAS_BACKEND, XLA_FLAGS or TF devices before Keras starts) and print
one JSON line starting with `RESULT ` on stdout.
"""

import inspect
import json

import numpy as np

FRAMES, BINS, EMBED, NOTES = 6, 4, 8, 3
GLOBAL_BATCH, STEPS = 8, 3
VARIANTS = (
    ("real", "inner"),
    ("abs", "bilinear"),
    ("absonly", "inner"),
    ("naive", "bilinear"),
)


def has_synchronized_bn():
    from cvattn_keras import layers as cl

    init = cl.ComplexBatchNormalization.__init__
    return "synchronized" in inspect.signature(init).parameters


def build_model(seed=7):
    """Every attention variant (CAtt, APAtt, AAtt, RIAtt; both products)
    with a padding mask, the whitening layer norms, and a batch norm
    (synchronized when the layer supports it). One full encoder layer
    (CAtt); the other variants as bare attention layers with residuals, to
    keep the graphs, and so the tests, small."""
    import keras

    from cvattn_keras import layers as cl

    keras.utils.set_random_seed(seed)
    spectra = keras.Input((FRAMES, 2 * BINS), name="spectra")
    # A float 0/1 mask (MirroredStrategy cannot distribute bool inputs:
    # AddN over bool), made boolean inside the model.
    keep = keras.Input((FRAMES,), name="keep")
    padding_mask = keras.ops.cast(keep, "bool")
    key_mask = keras.ops.expand_dims(padding_mask, 1)  # (B, 1, S)
    # No bias before the batch norm: it would get zero gradient in theory
    # and hold float rounding noise only (the norm removes the mean).
    x = cl.ComplexDense(EMBED, use_bias=False, name="embedding")(spectra)
    norm_args = {"synchronized": True} if has_synchronized_bn() else {}
    x = cl.ComplexBatchNormalization(name="batch_norm", **norm_args)(x)
    softmax, product = VARIANTS[0]
    x = cl.ComplexTransformerEncoder(
        2,
        softmax=softmax,
        product=product,
        normalization="whitening",
        name="encoder_0",
    )(x, padding_mask=padding_mask)
    for i, (softmax, product) in enumerate(VARIANTS[1:], 1):
        attention = cl.ComplexMultiHeadAttention(
            2,
            EMBED // 2,
            softmax=softmax,
            product=product,
            name=f"attention_{i}",
        )(x, x, attention_mask=key_mask)
        x = keras.layers.Add(name=f"residual_{i}")([x, attention])
    x = cl.ComplexLayerNormalization(name="final_norm")(x)
    x = cl.ComplexDense(NOTES, name="head_notes")(x)
    logits = cl.RealReadout(name="logits")(x)
    return keras.Model([spectra, keep], logits)


def data(batches=STEPS):
    """`batches` global batches: spectra, a padding mask (the last frames
    of some examples padded, never all) and multi-hot notes."""
    rng = np.random.default_rng(2024)
    n = batches * GLOBAL_BATCH
    x = rng.standard_normal((n, FRAMES, 2 * BINS)).astype("float32")
    lengths = rng.integers(2, FRAMES + 1, size=n)
    keep = (np.arange(FRAMES)[None, :] < lengths[:, None]).astype("float32")
    y = (rng.random((n, FRAMES, NOTES)) > 0.7).astype("float32")
    return x, keep, y


def compile_model(model, jit_compile=False, steps_per_execution=1):
    import keras

    model.compile(
        optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )


# Variables smaller than this are compared as if they had this size: the
# CAtt key biases get zero gradient in theory (the softmax ignores a
# per-query shift) and hold float32 rounding noise of size 1e-10, whose
# relative difference means nothing.
FLOOR = 1e-3


def max_relative_difference(weights, reference):
    """max over variables of max|w - r| / max(max|r|, FLOOR)."""
    if len(weights) != len(reference):
        raise ValueError(f"{len(weights)} weights vs {len(reference)}")
    worst = 0.0
    for w, r in zip(weights, reference):
        w, r = np.asarray(w, np.float64), np.asarray(r, np.float64)
        if w.shape != r.shape:
            raise ValueError(f"shapes {w.shape} vs {r.shape}")
        if not r.size:
            continue
        scale = max(float(np.max(np.abs(r))), FLOOR)
        worst = max(worst, float(np.max(np.abs(w - r))) / scale)
    return worst


def max_layer_relative_difference(weights, reference, names):
    """max over layers of max|w - r| / max|r|, both maxima over all the
    variables of the layer (the path up to the last `/`): differences
    measured against the layer's weight scale."""
    layers = {}
    for w, r, name in zip(weights, reference, names):
        w, r = np.asarray(w, np.float64), np.asarray(r, np.float64)
        if not r.size:
            continue
        diff, scale = layers.get(name.rpartition("/")[0], (0.0, 0.0))
        layers[name.rpartition("/")[0]] = (
            max(diff, float(np.max(np.abs(w - r)))),
            max(scale, float(np.max(np.abs(r)))),
        )
    return max(d / max(s, FLOOR) for d, s in layers.values())


def compare(weights, reference, names):
    """Both measures, for a RESULT."""
    return {
        "per_variable": max_relative_difference(weights, reference),
        "per_layer": max_layer_relative_difference(weights, reference, names),
        "worst": worst_variables(weights, reference, names),
    }


def max_change(weights, initial):
    """How far training moved the weights (so a test can tell that
    training happened)."""
    return max_relative_difference(weights, initial)


def report(**values):
    print("RESULT " + json.dumps(values), flush=True)


def save_weights(path, weights, names=None):
    np.savez(path, *[np.asarray(w) for w in weights])
    if names is not None:
        with open(str(path) + ".names.json", "w") as f:
            json.dump(list(names), f)


def worst_variables(weights, reference, names, count=3):
    """The `count` variables with the largest relative difference, for
    failure messages."""
    scored = sorted(
        (
            (max_relative_difference([w], [r]), n)
            for w, r, n in zip(weights, reference, names)
        ),
        reverse=True,
    )
    return [(n, f"{d:.3g}") for d, n in scored[:count]]


def load_weights(path):
    with np.load(path) as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]
