"""One worker of MultiWorkerMirroredStrategy training (or, without
TF_CONFIG, the single-device reference) with the custom loop of
cvattn_keras.distribution.train, checkpointing every step.

    TF_CONFIG=... python tf_multiworker.py CHECKPOINT_DIR OUT.npz [CRASH_AFTER]

With CRASH_AFTER, the process dies (os._exit, no cleanup) right after the
checkpoint of that step: a worker killed mid-training. Run again without
it, every worker resumes from the last checkpoint.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

from cvattn_keras import distribution as cdist  # noqa: E402

STEPS = 4


def main(argv):
    checkpoint_dir, out = argv[1], argv[2]
    crash_after = int(argv[3]) if len(argv) > 3 else None
    config = cdist.tf_config()  # ValueError naming TF_CONFIG if unusable
    if config is None:
        strategy = tf.distribute.get_strategy()
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()

    import common
    import keras

    x, keep, y = common.data(batches=STEPS)
    initial = [
        keras.ops.convert_to_numpy(w) for w in common.build_model().weights
    ]
    with strategy.scope():
        model = common.build_model()
        model.set_weights(initial)
        optimizer = keras.optimizers.SGD(0.05, momentum=0.9)

    def callback(step, loss):
        print(f"step {step} loss {loss:.6f}", flush=True)

    losses = cdist.train(
        model,
        (x, keep),
        y,
        strategy=strategy,
        optimizer=optimizer,
        loss_fn=lambda t, p: keras.losses.binary_crossentropy(
            t, p, from_logits=True
        ),
        global_batch_size=common.GLOBAL_BATCH,
        steps=crash_after or STEPS,
        checkpoint_dir=checkpoint_dir,
        callback=callback,
    )
    if crash_after is not None:
        sys.stdout.flush()
        os._exit(17)
    common.save_weights(
        out,
        [keras.ops.convert_to_numpy(w) for w in model.weights],
        [w.path for w in model.weights],
    )
    common.report(
        replicas=strategy.num_replicas_in_sync,
        steps_run=len(losses),
        initial_change=common.max_change(
            [keras.ops.convert_to_numpy(w) for w in model.weights], initial
        ),
    )


if __name__ == "__main__":
    main(sys.argv)
