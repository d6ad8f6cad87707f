"""Shared test setup: quiet TensorFlow, deterministic seeds, and the
`tensorflow_only` marker (skipped under the other Keras backends)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Under pytest-xdist's `--dist loadfile` the files go to the workers in
# collection order: the longest first (by their last measured durations,
# a few minutes each in CI), so that no worker is left running a long file
# at the end while the other idles.
_LONGEST_FIRST = (
    "test_distribution.py",
    "test_examples.py",
    "test_models.py",
    "test_export_gpu.py",
    "test_export_integer.py",
    "test_export.py",
    "test_export_onnx.py",
    "test_symbolic_tracing.py",
    "test_guides.py",
    "test_export_waveform.py",
    "test_export_generator.py",
    "test_waveform_models.py",
    "test_transformer.py",
    "test_cache.py",
    "test_serialization.py",
    "test_export_backends.py",
)


def _file_rank(item):
    name = os.path.basename(str(item.fspath))
    if name in _LONGEST_FIRST:
        return _LONGEST_FIRST.index(name)
    return len(_LONGEST_FIRST)


# The alternatives to full attention: under JAX, whose eager ops compile
# once per shape (the four files took 500 s there, against 2 minutes on
# TensorFlow), their tests over the softmax variants run for CAtt and
# APAtt only. The variants' arithmetic is the library's shared attention,
# checked variant by variant under JAX in test_attention.py and
# test_multi_head_attention.py; every variant of these layers runs under
# TensorFlow and PyTorch.
_ALTERNATIVES = (
    "test_low_rank_attention.py",
    "test_sparse_attention.py",
    "test_gated_attention.py",
    "test_lsh_attention.py",
)
_JAX_SOFTMAX = ("real", "abs")


def _other_variant_under_jax(item):
    if os.path.basename(str(item.fspath)) not in _ALTERNATIVES:
        return False
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("softmax", "real") not in _JAX_SOFTMAX


def pytest_collection_modifyitems(config, items):
    items.sort(key=_file_rank)  # stable: each file's order is kept
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return
    skip = pytest.mark.skip(
        reason=f"tests TensorFlow itself; the backend is {backend}"
    )
    variant = pytest.mark.skip(
        reason="under JAX the alternatives to full attention are tested "
        f"with softmax in {_JAX_SOFTMAX} (see tests/conftest.py)"
    )
    for item in items:
        if "tensorflow_only" in item.keywords:
            item.add_marker(skip)
        elif backend == "jax" and _other_variant_under_jax(item):
            item.add_marker(variant)


@pytest.fixture(autouse=True)
def _deterministic():
    """Every test starts from the same seeds and the float32 policy."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(20231)
