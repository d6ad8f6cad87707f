"""Train the music classifier on several devices or processes.

Trains `cvattn_keras.models.music_classifier` (small) on the built-in
`synthetic_music` data with one of:

- `single`: one device, TensorFlow (the reference);
- `mirrored`: `tf.distribute.MirroredStrategy` and `fit` (2 logical CPU
  devices when there is one CPU and no GPU);
- `multiworker`: `tf.distribute.MultiWorkerMirroredStrategy` with the
  custom loop of `cvattn_keras.distribution.train` (Keras 3's `fit` does
  not run under it), checkpointing every epoch. With `TF_CONFIG` set, this
  process is that worker; without, 2 local workers on 127.0.0.1 are
  started;
- `jax-data`, `jax-model`: `keras.distribution.DataParallel` /
  `ModelParallel` with `cvattn_keras.distribution.get_layout_map` on JAX
  (2 host devices forced on a CPU);
- `jax-multiprocess`: 2 JAX processes on 127.0.0.1 joined by
  `keras.distribution.initialize`, `DataParallel` across them.

The script chooses the backend and devices itself: it starts itself again
(or its workers) with `KERAS_BACKEND`, `XLA_FLAGS` or `TF_CONFIG` set. It
prints the per-replica and global batch, the throughput and the loss of
every epoch, and the held-out micro-averaged average precision
(`cvattn_keras.metrics.MicroAveragedPrecision`); with `--dropout 0` every
strategy trains the weights of one device (to float rounding), so the AP
is that of `single`.

Run:  python examples/train_distributed.py --strategy mirrored
          [--epochs 5] [--global-batch-size 16] [--smoke]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

# The workers (which inherit it) import cvattn_keras before keras: it
# quiets TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

# The examples' shared argument checks, beside this file (on sys.path when
# run as a script; added when loaded with runpy, as the tests do).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import _arguments as arguments  # noqa: E402

STRATEGIES = (
    "single",
    "mirrored",
    "multiworker",
    "jax-data",
    "jax-model",
    "jax-multiprocess",
)
BACKEND = {
    "single": "tensorflow",
    "mirrored": "tensorflow",
    "multiworker": "tensorflow",
    "jax-data": "jax",
    "jax-model": "jax",
    "jax-multiprocess": "jax",
}
_ROLE = "CVATTN_EXAMPLE_ROLE"  # set in the processes this script starts
_TIMEOUT = 900  # seconds, for any process this script starts


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=STRATEGIES, default="mirrored")
    positive = arguments.positive_int
    parser.add_argument("--epochs", type=positive, default=5)
    parser.add_argument("--samples", type=positive, default=256)
    parser.add_argument("--global-batch-size", type=positive, default=16)
    parser.add_argument("--devices", type=positive, default=2)
    parser.add_argument(
        "--dropout",
        type=arguments.float_in(0, 1, high_open=True),
        default=0.1,
    )
    parser.add_argument(
        "--learning-rate", type=arguments.positive_float, default=2e-3
    )
    parser.add_argument("--seed", type=arguments.non_negative_int, default=0)
    parser.add_argument(
        "--checkpoint-dir",
        type=arguments.output_folder,
        default=None,
        help="multiworker: where to checkpoint (default: a temporary dir)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a few seconds: tiny sizes"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs, args.samples, args.global_batch_size = 2, 32, 8
        args.dropout = 0.0
    if args.global_batch_size % args.devices:
        parser.error(
            "--global-batch-size must be divisible by --devices. Received: "
            f"--global-batch-size {args.global_batch_size}, --devices "
            f"{args.devices}"
        )
    return args


# ----------------------------------------------------------------------
# The launcher: sets up the backend and devices, starts the workers.
# ----------------------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child_env(args, **extra):
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env["KERAS_BACKEND"] = BACKEND[args.strategy]
    env["TF_CPP_MIN_LOG_LEVEL"] = env.get("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.strategy in ("jax-data", "jax-model"):
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "")
            + f" --xla_force_host_platform_device_count={args.devices}"
        )
    env[_ROLE] = "worker"
    env.update(extra)
    return env


def _with(envs, **extra):
    for env in envs:
        env.update(extra)
    return envs


def _launch(args, argv):
    """Starts this script again in the right environment (once, or once per
    worker); echoes the first process's output; returns its AP."""
    command = [sys.executable, os.path.abspath(__file__), *argv]
    ap_file = os.path.join(
        tempfile.mkdtemp(prefix="cvattn_train_distributed_"), "ap"
    )
    if args.strategy == "multiworker":
        ports = [_free_port() for _ in range(args.devices)]
        cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
        checkpoint_dir = args.checkpoint_dir or tempfile.mkdtemp()
        command += ["--checkpoint-dir", checkpoint_dir]
        envs = [
            _child_env(
                args,
                TF_CONFIG=json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ),
            )
            for i in range(args.devices)
        ]
    elif args.strategy == "jax-multiprocess":
        address = f"127.0.0.1:{_free_port()}"
        envs = [
            _child_env(
                args,
                KERAS_DISTRIBUTION_JOB_ADDRESSES=address,
                KERAS_DISTRIBUTION_NUM_PROCESSES=str(args.devices),
                KERAS_DISTRIBUTION_PROCESS_ID=str(i),
            )
            for i in range(args.devices)
        ]
    else:
        envs = [_child_env(args)]
    envs = _with(envs, CVATTN_EXAMPLE_AP_FILE=ap_file)
    processes = []
    try:
        for i, env in enumerate(envs):
            processes.append(
                subprocess.Popen(
                    command,
                    env=env,
                    stdout=None if i == 0 else subprocess.DEVNULL,
                    stderr=None if i == 0 else subprocess.DEVNULL,
                )
            )
        codes = [p.wait(timeout=_TIMEOUT) for p in processes]
    finally:
        for p in processes:  # stop what is left, by process id
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")
    with open(ap_file) as f:
        return float(f.read())


# ----------------------------------------------------------------------
# The worker: trains.
# ----------------------------------------------------------------------


def _data(args):
    import cvattn_keras as cvk

    size = dict(frames=16, bins=32, notes=8) if args.smoke else {}
    x, y = cvk.datasets.synthetic_music(
        num_samples=args.samples + args.samples // 4, seed=args.seed, **size
    )
    n = args.samples
    return (x[:n], y[:n]), (x[n:], y[n:])


def _model(args, frames, bins, notes):
    import keras

    import cvattn_keras as cvk

    # The reference architecture scaled down (front end: 32 -> 14 -> 6
    # bins for --smoke, 128 -> 62 -> 30 -> 14 otherwise).
    size = (
        dict(
            embed_dim=8,
            num_heads=2,
            num_layers=1,
            head_dim=8,
            frontend_filters=(4, 8),
            frontend_kernel_sizes=(6, 3),
        )
        if args.smoke
        else dict(
            embed_dim=32,
            num_heads=4,
            num_layers=2,
            head_dim=64,
            frontend_filters=(8, 16, 16),
            frontend_kernel_sizes=(6, 3, 3),
        )
    )
    keras.utils.set_random_seed(args.seed)
    return cvk.models.music_classifier(
        frames=frames,
        bins=bins,
        notes=notes,
        dropout=args.dropout,
        batch_norm_synchronized=True,
        **size,
    )


def _loss():
    import keras

    return keras.losses.BinaryCrossentropy(from_logits=True)


def _average_precision(model, x, y):
    import keras

    import cvattn_keras as cvk

    metric = cvk.metrics.MicroAveragedPrecision()
    logits = keras.ops.convert_to_numpy(model(x, training=False))
    metric.update_state(y, logits)
    return float(keras.ops.convert_to_numpy(metric.result()))


class _Throughput:
    """A Keras callback printing the loss and the examples per second of
    every epoch."""

    def __new__(cls, examples):
        import keras

        class Callback(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                seconds = time.perf_counter() - self.start
                print(
                    f"epoch {epoch + 1}: loss {logs['loss']:.4f}, "
                    f"{examples / seconds:.0f} examples/s",
                    flush=True,
                )

        return Callback()


def _report_batches(replicas, global_batch):
    print(
        f"model replicas: {replicas}, per-replica batch: "
        f"{global_batch // replicas}, global batch: {global_batch}",
        flush=True,
    )


def _fit(args, model, train, distribution_scope, replicas, batch=None):
    import keras

    with distribution_scope:
        model.compile(
            optimizer=keras.optimizers.Adam(args.learning_rate),
            loss=_loss(),
            jit_compile=BACKEND[args.strategy] == "jax" or "auto",
        )
    _report_batches(replicas, args.global_batch_size)
    x, y = train
    model.fit(
        x,
        y,
        batch_size=batch or args.global_batch_size,
        epochs=args.epochs,
        shuffle=False,
        verbose=0,
        callbacks=[_Throughput(len(x))],
    )


def _run_tensorflow(args, train, test):
    import tensorflow as tf

    if args.strategy == "mirrored":
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:  # one CPU: split it into logical devices
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * args.devices
            )
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    with strategy.scope():
        model = _model(
            args,
            *train[0].shape[1:2],
            train[0].shape[2] // 2,
            train[1].shape[2],
        )
    _fit(args, model, train, strategy.scope(), strategy.num_replicas_in_sync)
    return model


def _run_multiworker(args, train, test):
    import keras
    import tensorflow as tf

    from cvattn_keras import distribution as cdist

    if cdist.tf_config() is None:
        raise ValueError(
            "--strategy multiworker needs `TF_CONFIG` (or run it without "
            "TF_CONFIG and it starts its local workers)"
        )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = train
    with strategy.scope():
        model = _model(args, x.shape[1], x.shape[2] // 2, y.shape[2])
        optimizer = keras.optimizers.Adam(args.learning_rate)
    _report_batches(strategy.num_replicas_in_sync, args.global_batch_size)
    steps_per_epoch = len(x) // args.global_batch_size
    state = {"start": time.perf_counter(), "losses": []}

    def callback(step, loss):
        state["losses"].append(loss)
        if step % steps_per_epoch == 0:
            seconds = time.perf_counter() - state["start"]
            examples = steps_per_epoch * args.global_batch_size
            mean = sum(state["losses"]) / len(state["losses"])
            print(
                f"epoch {step // steps_per_epoch}: loss {mean:.4f}, "
                f"{examples / seconds:.0f} examples/s",
                flush=True,
            )
            state["start"], state["losses"] = time.perf_counter(), []

    loss = _loss()
    cdist.train(
        model,
        x,
        y,
        strategy=strategy,
        optimizer=optimizer,
        loss_fn=lambda t, p: keras.losses.binary_crossentropy(
            t, p, from_logits=loss.from_logits
        ),
        global_batch_size=args.global_batch_size,
        steps=steps_per_epoch * args.epochs,
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every=steps_per_epoch,
        callback=callback,
    )
    return model


def _run_jax(args, train, test):
    import keras

    from cvattn_keras import distribution as cdist

    x, y = train
    batch = None
    if args.strategy == "jax-multiprocess":
        keras.distribution.initialize()  # from KERAS_DISTRIBUTION_* vars
        devices = keras.distribution.list_devices()
        distribution = keras.distribution.DataParallel(
            devices=devices, auto_shard_dataset=False
        )
        # Each process feeds its share of every global batch.
        import jax
        import numpy as np

        share = args.global_batch_size // jax.process_count()
        index = jax.process_index()
        rows = np.concatenate(
            [
                np.arange(b + index * share, b + (index + 1) * share)
                for b in range(
                    0,
                    len(x) - args.global_batch_size + 1,
                    args.global_batch_size,
                )
            ]
        )
        x, y, batch = x[rows], y[rows], share
    else:
        devices = keras.distribution.list_devices()
        if args.strategy == "jax-data":
            distribution = keras.distribution.DataParallel(devices=devices)
        else:
            mesh = keras.distribution.DeviceMesh(
                (1, len(devices)), ("batch", "model"), devices
            )
            distribution = keras.distribution.ModelParallel(
                layout_map=cdist.get_layout_map(mesh), batch_dim_name="batch"
            )
    keras.distribution.set_distribution(distribution)
    model = _model(args, x.shape[1], x.shape[2] // 2, y.shape[2])
    replicas = distribution.num_model_replicas  # 1 for jax-model
    _fit(args, model, (x, y), _Null(), replicas, batch)
    return model


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *args):
        return False


def _work(args):
    train, test = _data(args)
    if args.strategy == "multiworker":
        model = _run_multiworker(args, train, test)
    elif BACKEND[args.strategy] == "jax":
        model = _run_jax(args, train, test)
    else:
        model = _run_tensorflow(args, train, test)
    ap = _average_precision(model, *test)
    print(f"held-out micro-averaged AP: {ap:.4f}", flush=True)
    return ap


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.strategy == "multiworker" and os.environ.get("TF_CONFIG"):
        # A worker of a cluster someone else started: this process is it.
        from cvattn_keras import distribution as cdist

        cdist.tf_config()  # a ValueError naming TF_CONFIG if unusable
        os.environ[_ROLE] = "worker"
        os.environ["KERAS_BACKEND"] = "tensorflow"
    if os.environ.get(_ROLE) != "worker":
        return _launch(args, argv)
    ap = _work(args)
    parent = os.environ.get("CVATTN_EXAMPLE_AP_FILE")
    if parent and _is_first_worker():
        with open(parent, "w") as f:
            f.write(repr(ap))
    return ap


def _is_first_worker():
    config = os.environ.get("TF_CONFIG")
    if config:
        return json.loads(config)["task"]["index"] == 0
    return os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "0") == "0"


if __name__ == "__main__":
    main()
