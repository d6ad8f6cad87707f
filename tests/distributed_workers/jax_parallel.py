"""JAX over 2 forced host devices: one device vs DataParallel vs
ModelParallel (cvattn_keras.distribution.get_layout_map), the same global
batches and initial weights; and XLA + steps_per_execution on one device.

    python jax_parallel.py
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=2"
)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402
import jax  # noqa: E402
import keras  # noqa: E402

from cvattn_keras import distribution as cdist  # noqa: E402


def fit(initial, distribution=None, steps_per_execution=1):
    x, keep, y = common.data()
    scope = distribution.scope() if distribution else _null()
    with scope:
        model = common.build_model()
        model.set_weights(initial)
        common.compile_model(
            model, jit_compile=True, steps_per_execution=steps_per_execution
        )
        model.fit(
            [x, keep],
            y,
            batch_size=common.GLOBAL_BATCH,
            epochs=1,
            shuffle=False,
            verbose=0,
        )
        layouts = {
            v.path: tuple(getattr(v.value.sharding, "spec", ()))
            for v in model.weights
        }
        return [keras.ops.convert_to_numpy(w) for w in model.weights], layouts


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def main():
    assert len(jax.devices()) == 2, jax.devices()
    reference_model = common.build_model()
    names = [w.path for w in reference_model.weights]
    initial = [keras.ops.convert_to_numpy(w) for w in reference_model.weights]
    single, _ = fit(initial)
    looped, _ = fit(initial, steps_per_execution=common.STEPS)
    devices = keras.distribution.list_devices()
    data_parallel, _ = fit(
        initial, keras.distribution.DataParallel(devices=devices)
    )
    mesh = keras.distribution.DeviceMesh((1, 2), ("batch", "model"), devices)
    model_parallel, layouts = fit(
        initial,
        keras.distribution.ModelParallel(
            layout_map=cdist.get_layout_map(mesh), batch_dim_name="batch"
        ),
    )
    sharded = {p: list(s) for p, s in layouts.items() if "model" in s}
    common.report(
        change=common.max_change(single, initial),
        steps_per_execution=common.compare(looped, single, names),
        data_parallel=common.compare(data_parallel, single, names),
        model_parallel=common.compare(model_parallel, single, names),
        sharded=sharded,
        synchronized_bn=common.has_synchronized_bn(),
    )


if __name__ == "__main__":
    main()
