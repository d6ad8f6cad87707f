"""Runs the layers on whichever Keras backend KERAS_BACKEND selects and
checks them against the NumPy reference (every variant, value heads unlike
key heads, one key): `KERAS_BACKEND=jax python
tests/backend_smoke.py`. `test_backends.py` runs it for JAX and PyTorch
when they are installed. Prints the worst parity error; exits 1 on failure.
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import numpy_reference as ref  # noqa: E402
from models import all_blocks_inputs  # noqa: E402
from models import all_blocks_model  # noqa: E402

import cvattn_keras as cvk  # noqa: E402


def main():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    worst = 0.0
    for softmax in cvk.attention.SOFTMAX_VARIANTS:
        for product in cvk.attention.PRODUCTS:
            query = ref.random_complex(rng, (2, 4, 3))
            value = ref.random_complex(rng, (2, 6, 3))
            mask = rng.random((2, 4, 6)) > 0.3
            mask[1, 2] = False
            layer = cvk.layers.ComplexMultiHeadAttention(
                2,
                3,
                softmax=softmax,
                product=product,
                dropout=0.1,
                seed=1,
                bias_initializer="random_normal",
            )
            q, v = cvk.to_stacked(query), cvk.to_stacked(value)
            out, weights = layer(
                q, v, attention_mask=mask, return_attention_scores=True
            )
            fused = layer(q, v, attention_mask=mask)
            trained = layer(q, v, attention_mask=mask, training=True)
            assert np.all(np.isfinite(keras.ops.convert_to_numpy(trained)))
            expected, expected_weights = ref.multi_head_attention(
                query,
                value,
                value,
                ref.attention_params(layer),
                2,
                softmax,
                product,
                3**-0.5,
                mask,
            )
            for got, want in (
                (out, expected),
                (fused, expected),
                (weights, expected_weights),
            ):
                got = cvk.from_stacked(keras.ops.convert_to_numpy(got))
                worst = max(worst, float(np.abs(got - want).max()))
    # The fused CAtt path with value_dim != key_dim (it crashed on JAX),
    # and attention over one key (S = 1) for every variant.
    for softmax in cvk.attention.SOFTMAX_VARIANTS:
        for keys, value_dim in ((6, 2), (1, 3)):
            query = ref.random_complex(rng, (2, 4, 3))
            value = ref.random_complex(rng, (2, keys, 3))
            layer = cvk.layers.ComplexMultiHeadAttention(
                2, 3, value_dim=value_dim, softmax=softmax
            )
            out = layer(cvk.to_stacked(query), cvk.to_stacked(value))
            expected, _ = ref.multi_head_attention(
                query,
                value,
                value,
                ref.attention_params(layer),
                2,
                softmax,
                "inner",
                3**-0.5,
            )
            got = cvk.from_stacked(keras.ops.convert_to_numpy(out))
            worst = max(worst, float(np.abs(got - expected).max()))
    model = all_blocks_model()
    inputs = all_blocks_inputs(rng)
    model.compile("adam", "mse")
    history = model.fit(inputs, np.zeros((3, 8, 4)), epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "blocks.keras")
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
        same = np.array_equal(
            keras.ops.convert_to_numpy(loaded(inputs)),
            keras.ops.convert_to_numpy(model(inputs)),
        )
    print(
        f"backend {keras.backend.backend()}: worst parity error "
        f"{worst:.2e}, all blocks fit and reload: {same}"
    )
    if not (worst < 1e-5 and same):
        sys.exit(1)


if __name__ == "__main__":
    main()
