"""TensorFlow over 2 logical CPU devices: one device vs MirroredStrategy
with `fit`, and vs the custom loop of cvattn_keras.distribution.train
under MirroredStrategy; XLA + steps_per_execution on one device.

    python tf_mirrored.py
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

# Before TensorFlow initializes its devices.
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)

import common  # noqa: E402
import keras  # noqa: E402

from cvattn_keras import distribution as cdist  # noqa: E402


def fit(initial, strategy=None, jit_compile=False, steps_per_execution=1):
    x, keep, y = common.data()
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = common.build_model()
        model.set_weights(initial)
        common.compile_model(model, jit_compile, steps_per_execution)
    model.fit(
        [x, keep],
        y,
        batch_size=common.GLOBAL_BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def custom_loop(initial, strategy):
    x, keep, y = common.data()
    with strategy.scope():
        model = common.build_model()
        model.set_weights(initial)
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)
    cdist.train(
        model,
        (x, keep),
        y,
        strategy=strategy,
        optimizer=optimizer,
        loss_fn=lambda t, p: keras.losses.binary_crossentropy(
            t, p, from_logits=True
        ),
        global_batch_size=common.GLOBAL_BATCH,
        steps=common.STEPS,
    )
    return [keras.ops.convert_to_numpy(w) for w in model.weights]


def main():
    reference_model = common.build_model()
    names = [w.path for w in reference_model.weights]
    initial = [keras.ops.convert_to_numpy(w) for w in reference_model.weights]
    single = fit(initial)
    xla = fit(initial, jit_compile=True, steps_per_execution=common.STEPS)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    distributed = fit(initial, mirrored)
    loop_mirrored = custom_loop(initial, mirrored)
    common.report(
        replicas=mirrored.num_replicas_in_sync,
        change=common.max_change(single, initial),
        xla_steps_per_execution=common.compare(xla, single, names),
        mirrored_fit=common.compare(distributed, single, names),
        custom_loop_mirrored=common.compare(loop_mirrored, single, names),
        synchronized_bn=common.has_synchronized_bn(),
    )


if __name__ == "__main__":
    main()
