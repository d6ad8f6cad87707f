"""Writing a reference state dict: `reference_state_dict`.

The inverse of loading: the variables' values in the reference's names,
shapes and dtypes (float32, complex64 for its complex parameters), in the
order of its modules' `state_dict`.
"""

import keras
import numpy as np

from cvattn_keras.interop._models import _mapping

BATCH_NORM_STATISTICS = ("trained", "untrained")


def reference_state_dict(model_or_layer, batch_norm_statistics="trained"):
    """The weights of `model_or_layer` as a reference `state_dict`.

    Args:
        model_or_layer: as for `load_reference_state_dict`.
        batch_norm_statistics: the shapes of the batch norms'
            `running_mean` and `running_cov`. `"trained"` (default):
            `(1, C, 1)` and `(1, C, 2, 2)`, the shapes a reference module
            has after one training step (run one training-mode forward
            pass on it before `load_state_dict`, as the reference's
            scripts do before loading). `"untrained"`: the placeholders of
            a fresh module, `(C,)` zeros and the identity `(C, C)`; they
            cannot hold statistics, so this is a `ValueError` unless every
            batch norm still has its initial ones (mean 0, R = I).

    Returns:
        A dict from the reference's parameter names (in the order of its
        modules' `state_dict`) to NumPy arrays in its shapes and dtypes:
        float32, complex64 for its complex parameters. Each pair
        `Linear_real.bias`, `Linear_img.bias` (and the convolutions')
        is chosen to load back bit-exactly where possible (see the
        docstring of `cvattn_keras.interop`).
    """
    if batch_norm_statistics not in BATCH_NORM_STATISTICS:
        raise ValueError(
            "`batch_norm_statistics` must be one of "
            f"{list(BATCH_NORM_STATISTICS)}. Received: "
            f"batch_norm_statistics={batch_norm_statistics!r}"
        )
    _, groups, order = _mapping(
        model_or_layer, {"batch_norm_statistics": batch_norm_statistics}
    )
    result = {}
    for group in groups:
        values = [
            keras.ops.convert_to_numpy(variable).astype(np.float32)
            for _, variable in group.variables
        ]
        arrays = group.save(values)
        for key, array in zip(group.keys, arrays):
            dtype = np.complex64 if key.complex else np.float32
            result[key.name] = np.ascontiguousarray(array, dtype=dtype)
    return {name: result[name] for name in order}
