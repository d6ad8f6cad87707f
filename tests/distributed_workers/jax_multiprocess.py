"""One of 2 JAX processes (one CPU device each) training with DataParallel
across both after `keras.distribution.initialize`; or, with PROCESS_ID -1,
the single-device reference.

    python jax_multiprocess.py COORDINATOR_PORT PROCESS_ID OUT.npz

Process `i` feeds its half of every global batch (rows
`[b * G + i * G / 2, b * G + (i + 1) * G / 2)`), Keras' convention for
per-process data; together they train on the same global batches as one
device.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

# CPU collectives across processes.
jax.config.update("jax_cpu_collectives_implementation", "gloo")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def main(argv):
    port, process_id, out = int(argv[1]), int(argv[2]), argv[3]
    import common

    x, keep, y = common.data()
    batch = common.GLOBAL_BATCH
    if process_id >= 0:
        keras.distribution.initialize(
            job_addresses=f"127.0.0.1:{port}",
            num_processes=2,
            process_id=process_id,
        )
        devices = keras.distribution.list_devices()
        assert len(devices) == 2, devices
        keras.distribution.set_distribution(
            keras.distribution.DataParallel(
                devices=devices, auto_shard_dataset=False
            )
        )
        half = batch // 2
        rows = np.concatenate(
            [
                np.arange(
                    b * batch + process_id * half,
                    b * batch + (process_id + 1) * half,
                )
                for b in range(len(x) // batch)
            ]
        )
        x, keep, y = x[rows], keep[rows], y[rows]
        batch = half
    model = common.build_model()
    initial = [keras.ops.convert_to_numpy(w) for w in model.weights]
    common.compile_model(model, jit_compile=True)
    model.fit(
        [x, keep], y, batch_size=batch, epochs=1, shuffle=False, verbose=0
    )
    weights = [keras.ops.convert_to_numpy(w) for w in model.weights]
    common.save_weights(out, weights, [w.path for w in model.weights])
    common.report(
        process_id=process_id,
        devices=jax.device_count(),
        change=common.max_change(weights, initial),
    )


if __name__ == "__main__":
    main(sys.argv)
