"""Distributed training: layouts for `keras.distribution` and a
multi-worker custom training loop for `tf.distribute`.

- `get_layout_map(device_mesh, ...)`: the keras-hub convention. A
  `keras.distribution.LayoutMap` that shards every complex kernel of this
  library's layers for `keras.distribution.ModelParallel` (JAX backend).
- `make_train_step`, `train`: TensorFlow only. Keras 3's `fit` does not run
  under `tf.distribute.MultiWorkerMirroredStrategy` (keras-team/keras issue
  20585), so this is the custom loop of TensorFlow's multi-worker guide
  (`strategy.run`, `strategy.reduce`, the per-replica loss scaled by the
  global batch, a `tf.train.CheckpointManager` for fault tolerance). It
  also runs under `MirroredStrategy`, `TPUStrategy` and the default
  strategy. TensorFlow is imported inside these functions only, so this
  module imports under every backend.
- `tf_config()`: reads and checks the `TF_CONFIG` environment variable.

The layout (Megatron-style, checked by counting the collectives of the
compiled HLO, see `docs/distributed.md`): the query, key and value kernels
`(in, heads * head_dim)` and the first feed-forward / head kernel are
sharded on their output axis ("column parallel"), the attention output, the
second feed-forward and the note kernels on their input axis ("row
parallel"). `kernel_real` and `kernel_imag` are always sharded the same
way, so each device holds the matching real and imaginary columns (rows).
In the attention the projections are reshaped per head, so an output-axis
shard is a block of whole heads and the layer needs exactly the
communication of `keras.layers.MultiHeadAttention` with the same layout:
one all-reduce of the output. The other kernel axis is sharded on the data
axis, as keras-hub does (weights sharded FSDP-style when that axis has more
than one device).
"""

import collections.abc
import json
import os

import keras

from cvattn_keras import _validation as check

__all__ = ["get_layout_map", "make_train_step", "tf_config", "train"]

_PARTS = r"(real|imag)"
# Sublayer names of this library's layers (see the layers' `build`).
_COLUMN = r"(query|key|value|feedforward_in|\w*head_dense)"
_ROW = r"(attention_output|feedforward_out|\w*head_notes)"


def _layout_rules(model, data):
    """(regex, axes) pairs, mutually exclusive under `re.fullmatch`."""
    prefix = r"(.*/)?"
    known = rf"{_COLUMN}|{_ROW}|\w*conv\w*"
    return [
        # Column parallel: shard the output axis (whole heads).
        (rf"{prefix}{_COLUMN}/kernel_{_PARTS}", (data, model)),
        (rf"{prefix}{_COLUMN}/bias_{_PARTS}", (model,)),
        # Row parallel: shard the input axis; the bias stays replicated.
        (rf"{prefix}{_ROW}/kernel_{_PARTS}", (model, data)),
        # ComplexConv1D (kernel_size, in, filters), by its name: the
        # library's default `complex_conv1d` and the front end's `conv_i`.
        # Only the output channels are split: the kernels are small, and
        # a first block reads one channel, which no axis can split.
        (rf"{prefix}\w*conv\w*/kernel_{_PARTS}", (None, None, model)),
        (rf"{prefix}\w*conv\w*/bias_{_PARTS}", (model,)),
        # Any other ComplexDense (embeddings, ...): column parallel. Its
        # bias stays replicated: a path cannot tell it from a norm's.
        (rf"{prefix}(?!({known})/)[^/]+/kernel_{_PARTS}", (data, model)),
    ]


def get_layout_map(
    device_mesh,
    model_parallel_dim_name="model",
    data_parallel_dim_name="batch",
):
    """A `keras.distribution.LayoutMap` for this library's layers.

    The keras-hub convention (`Backbone.get_layout_map`). Use it with
    `keras.distribution.ModelParallel`:

    ```python
    mesh = keras.distribution.DeviceMesh(
        (1, 2), ("batch", "model"), keras.distribution.list_devices()
    )
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(
            layout_map=cvattn_keras.distribution.get_layout_map(mesh),
            batch_dim_name="batch",
        )
    )
    ```

    Keys are regular expressions matched with `re.fullmatch` against
    variable paths (`encoder_0/self_attention/query/kernel_real`); at most
    one key matches a path, and variables no key matches (norms, moving
    statistics, `RealReadout`) are replicated. Kernels of 2-D
    `ComplexDense` layers and projections are matched by layer name:

    - `query`, `key`, `value`, `feedforward_in`, `*head_dense`: kernel
      `(data, model)` (column parallel), bias `(model,)`;
    - `attention_output`, `feedforward_out`, `*head_notes`: kernel
      `(model, data)` (row parallel), bias replicated;
    - a name containing `conv` (`ComplexConv1D`): kernel
      `(None, None, model)`, bias `(model,)`;
    - any other layer's `kernel_real` / `kernel_imag`: `(data, model)`,
      bias replicated (its path cannot tell it from a norm's bias).

    (`data` and `model` are the two axis names.) A `ComplexConv1D` must
    have `conv` in its name (its default name does) and every other layer
    with a `kernel_real` must be 2-D (`ComplexDense`).

    Args:
        device_mesh: a `keras.distribution.DeviceMesh`.
        model_parallel_dim_name: the mesh axis the kernels are split
            along. Defaults to `"model"`.
        data_parallel_dim_name: the mesh axis of the batch; the kernels'
            other axis is split along it. Defaults to `"batch"`.

    Returns:
        A `keras.distribution.LayoutMap` on `device_mesh`.

    Raises:
        ValueError: if `device_mesh` is not a `DeviceMesh` or lacks one of
            the named axes.
    """
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise ValueError(
            "`device_mesh` must be a `keras.distribution.DeviceMesh`. "
            f"Received: device_mesh={device_mesh!r}"
        )
    names = tuple(device_mesh.axis_names)
    for argument, value in (
        ("model_parallel_dim_name", model_parallel_dim_name),
        ("data_parallel_dim_name", data_parallel_dim_name),
    ):
        if value not in names:
            raise ValueError(
                f"`{argument}` must be an axis of the device mesh, whose "
                f"axis names are {list(names)}. Received: "
                f"{argument}={value!r}"
            )
    if model_parallel_dim_name == data_parallel_dim_name:
        raise ValueError(
            "`model_parallel_dim_name` and `data_parallel_dim_name` must "
            f"differ. Received: both={model_parallel_dim_name!r}"
        )
    layout_map = keras.distribution.LayoutMap(device_mesh)
    for key, axes in _layout_rules(
        model_parallel_dim_name, data_parallel_dim_name
    ):
        layout_map[key] = axes
    return layout_map


# ----------------------------------------------------------------------
# tf.distribute (TensorFlow only).
# ----------------------------------------------------------------------


def tf_config(environ=None):
    """The parsed `TF_CONFIG` environment variable, checked, or `None`.

    Returns `None` when `TF_CONFIG` is unset or empty. Otherwise it must be
    JSON with a `cluster` holding a non-empty `worker` list of
    `"host:port"` strings and a `task` `{"type": "worker" | "chief" |
    "evaluator" | "ps", "index": i}` whose index is in the cluster.

    Raises:
        ValueError: naming `TF_CONFIG`, for anything else; naming
            `environ` for an `environ` that is not a mapping.
    """
    environ = os.environ if environ is None else environ
    if not isinstance(environ, collections.abc.Mapping):
        raise ValueError(
            "`environ` must be a mapping of environment variables (like "
            f"`os.environ`) or None. Received: environ={environ!r}"
        )
    text = environ.get("TF_CONFIG", "")
    if not isinstance(text, str):
        raise ValueError(
            f"`TF_CONFIG` must be a string. Received: TF_CONFIG={text!r}"
        )
    if not text.strip():
        return None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"`TF_CONFIG` must be JSON ({error}). Received: TF_CONFIG={text!r}"
        ) from None
    problem = _tf_config_problem(config)
    if problem:
        raise ValueError(f"`TF_CONFIG` {problem}. Received: TF_CONFIG={text!r}")
    return config


def _tf_config_problem(config):
    if not isinstance(config, dict):
        return "must be a JSON object"
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        return 'needs a "cluster" object'
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            return f'needs a non-empty list of addresses for job "{job}"'
        for address in addresses:
            host, _, port = str(address).rpartition(":")
            if not host or not port.isdigit():
                return f'has an address that is not "host:port": {address!r}'
    if "worker" not in cluster and "chief" not in cluster:
        return 'needs a "worker" (or "chief") job in "cluster"'
    if not isinstance(task, dict):
        return 'needs a "task" object {"type": ..., "index": ...}'
    kind, index = task.get("type"), task.get("index")
    if kind not in cluster and kind != "evaluator":
        return (
            f'has task type {kind!r}, which is not a job of "cluster" '
            f"({sorted(cluster)})"
        )
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        return f"needs a non-negative integer task index, not {index!r}"
    if kind in cluster and index >= len(cluster[kind]):
        return (
            f"has task index {index}, but the {kind!r} job has "
            f"{len(cluster[kind])} addresses"
        )
    return None


def _per_example_mean(loss_fn, y, pred):
    """`loss_fn(y, pred)` averaged over all but the batch axis: `(B,)`."""
    import tensorflow as tf

    values = tf.convert_to_tensor(loss_fn(y, pred))
    if values.shape.rank and values.shape.rank > 1:
        values = tf.reduce_mean(values, axis=list(range(1, values.shape.rank)))
    return values


def make_train_step(
    model,
    optimizer,
    loss_fn,
    strategy,
    global_batch_size,
    jit_compile=False,
):
    """A `tf.function` running one synchronous training step on `strategy`.

    TensorFlow's multi-worker custom-loop pattern: every replica computes
    `loss_fn(y, model(x, training=True))` per example (averaged over any
    axes after the batch), sums it and divides by `global_batch_size` (the
    batch summed over all replicas and workers, `tf.nn.compute_average_
    loss`) and adds the model's regularization losses divided by the number
    of replicas; the Keras optimizer sums the replicas' gradients and
    applies them. With the same global batch the result is that of one
    device training on the whole batch with a mean loss.

    Args:
        model: a Keras model created in `strategy.scope()`.
        optimizer: a Keras optimizer created in `strategy.scope()`.
        loss_fn: `loss_fn(y_true, y_pred)` -> per-example (or per-element)
            losses, e.g. `keras.losses.binary_crossentropy` or a
            `keras.losses.Loss` with `reduction=None`.
        strategy: a `tf.distribute.Strategy`.
        global_batch_size: positive int.
        jit_compile: compile the step with XLA (what `TPUStrategy` does
            anyway). Not supported by `MirroredStrategy` over logical CPU
            devices.

    Returns:
        `step(distributed_batch)` -> the global mean loss (a scalar tensor),
        where `distributed_batch` is an `(x, y)` pair of per-replica values
        (from `strategy.experimental_distribute_dataset` or
        `strategy.experimental_distribute_values_from_function`).

    Raises:
        ValueError: naming the argument and the value received, for a
            `model` that is not a built Keras layer or model, an
            `optimizer` that is not a Keras optimizer, a `loss_fn` that is
            not callable, a `strategy` that is not a `tf.distribute`
            strategy, a `global_batch_size` that is not a positive int or
            a `jit_compile` that is not a bool; before the optimizer is
            built.
    """
    import tensorflow as tf

    global_batch_size = _check_step_arguments(
        model, optimizer, loss_fn, strategy, global_batch_size, jit_compile
    )
    # Variables are created here, not lazily in the first traced step (a
    # tf.function may not create them under a strategy).
    with strategy.scope():
        if not optimizer.built:
            optimizer.build(model.trainable_variables)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            per_example = _per_example_mean(loss_fn, y, pred)
            loss = tf.nn.compute_average_loss(
                per_example, global_batch_size=global_batch_size
            )
            if model.losses:
                loss += tf.nn.scale_regularization_loss(tf.add_n(model.losses))
        variables = model.trainable_variables
        gradients = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(gradients, variables))
        return loss

    @tf.function(jit_compile=jit_compile)
    def step(batch):
        x, y = batch
        losses = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return step


def _check_step_arguments(
    model, optimizer, loss_fn, strategy, global_batch_size, jit_compile
):
    """Raises a `ValueError` naming the first bad argument of
    `make_train_step` (and `train`); changes nothing. Returns
    `global_batch_size` as an int."""
    import tensorflow as tf

    if not isinstance(model, keras.layers.Layer):
        raise ValueError(
            f"`model` must be a Keras model. Received: model={model!r}"
        )
    if not model.built:
        raise ValueError(
            "`model` must be built (called once, or created with "
            "`keras.Input`) before `make_train_step`. Received: "
            f"model={model!r} (not built)"
        )
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(
            "`optimizer` must be a Keras optimizer. Received: "
            f"optimizer={optimizer!r}"
        )
    if not callable(loss_fn):
        raise ValueError(
            "`loss_fn` must be callable, `loss_fn(y_true, y_pred)`. "
            f"Received: loss_fn={loss_fn!r}"
        )
    strategies = (tf.distribute.Strategy, tf.compat.v1.distribute.Strategy)
    if not isinstance(strategy, strategies):
        raise ValueError(
            "`strategy` must be a `tf.distribute.Strategy` (e.g. "
            "`tf.distribute.get_strategy()`). Received: "
            f"strategy={strategy!r}"
        )
    global_batch_size = check.positive_int(
        global_batch_size, "global_batch_size"
    )
    check.boolean(jit_compile, "jit_compile")
    return global_batch_size


def _examples(x, y):
    """The number of examples of `x` and `y` (nested structures of
    arrays): the common length of the first axis of every array. Raises
    a `ValueError` naming `x` and `y` otherwise."""
    import numpy as np

    sizes = {}
    for name, data in (("x", x), ("y", y)):
        leaves = keras.tree.flatten(data)
        shapes = [np.shape(leaf) for leaf in leaves]
        if not leaves or any(len(shape) == 0 for shape in shapes):
            raise ValueError(
                f"`{name}` must be an array, or a structure of arrays, "
                "with a batch axis first. Received: "
                f"{name} of shapes {shapes}"
            )
        sizes[name] = [shape[0] for shape in shapes]
    if len(set(sizes["x"] + sizes["y"])) != 1:
        raise ValueError(
            "`x` and `y` must hold the same number of examples (the first "
            f"axis of every array). Received: first axes x: {sizes['x']}, "
            f"y: {sizes['y']}"
        )
    return sizes["x"][0]


def _replica_batches(strategy, x, y, global_batch_size):
    """A function `step -> (x, y)` distributed over the replicas: batch
    `step` (cyclic over the data) holds rows `[step * G, (step + 1) * G)`
    and replica `r` of `n` takes its `r`-th contiguous `G / n` of them, so
    every replica count sees the same global batches. `x` and `y` may be
    nested structures (lists, tuples, dicts) of arrays."""
    import numpy as np

    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise ValueError(
            "`global_batch_size` must be divisible by the number of "
            f"replicas ({replicas}). Received: "
            f"global_batch_size={global_batch_size}"
        )
    per_replica = global_batch_size // replicas
    examples = _examples(x, y)
    batches = examples // global_batch_size
    if batches < 1:
        raise ValueError(
            f"The data ({examples} examples) must hold at least one global "
            f"batch. Received: global_batch_size={global_batch_size}"
        )

    def at_step(step):
        start = (step % batches) * global_batch_size

        def value(context):
            first = start + context.replica_id_in_sync_group * per_replica
            rows = slice(first, first + per_replica)
            return keras.tree.map_structure(
                lambda a: np.asarray(a[rows]), (x, y)
            )

        return strategy.experimental_distribute_values_from_function(value)

    return at_step


def train(
    model,
    x,
    y,
    *,
    strategy,
    optimizer,
    loss_fn,
    global_batch_size,
    steps,
    checkpoint_dir=None,
    checkpoint_every=1,
    max_to_keep=2,
    jit_compile=False,
    callback=None,
):
    """Trains `model` for `steps` synchronous steps of `make_train_step`,
    resuming from the last checkpoint in `checkpoint_dir` if there is one.

    Batch `s` (cyclic over the data, no shuffling) is rows
    `[s * G, (s + 1) * G)` of `x`, `y` (NumPy arrays, every worker holding
    the same arrays), with `G = global_batch_size`; replica `r` takes its
    contiguous share. So one device and any number of replicas see the same
    global batches, and a restarted worker the batches it missed.

    Fault tolerance (TensorFlow's multi-worker guide): the model, the
    optimizer and the step counter are saved with a
    `tf.train.CheckpointManager` every `checkpoint_every` steps; the chief
    (worker 0) writes to `checkpoint_dir`, the other workers to a
    temporary directory beside it that is removed after writing (every
    worker must take part in saving). When a worker fails, restart all
    workers with the same command: they restore the last checkpoint and
    continue, ending with the weights of an uninterrupted run.

    Args:
        model: the model, created in `strategy.scope()`.
        optimizer: the optimizer, created in `strategy.scope()`.
        x: NumPy array (or structure of arrays) of inputs.
        y: NumPy array (or structure of arrays) of targets.
        strategy: a `tf.distribute.Strategy`.
        loss_fn: per-example loss, see `make_train_step`.
        global_batch_size: positive int, divisible by the replica count,
            at most the number of examples.
        steps: positive int, the total number of steps (including those
            already done).
        checkpoint_dir: directory for the checkpoints, or `None`.
        checkpoint_every: positive int: save every this many steps.
        max_to_keep: positive int, the checkpoints kept; `None` keeps
            all.
        jit_compile: bool, see `make_train_step`.
        callback: optional `callback(step, loss)` after every step (`step`
            counts from 1; `loss` a float).

    Returns:
        The list of the losses of the steps run by this call.

    Raises:
        ValueError: naming the argument and the value received, before
            the first step (nothing changed: no weight, optimizer or
            checkpoint): the arguments of `make_train_step`; `x`, `y`
            without a common number of examples or holding less than one
            global batch; a `global_batch_size` the replicas do not
            divide; `steps`, `checkpoint_every` not positive ints;
            `max_to_keep` not a positive int or None; `checkpoint_dir`
            not a non-empty path or None; `callback` neither callable
            nor None.
    """
    import shutil

    import tensorflow as tf

    global_batch_size = _check_step_arguments(
        model, optimizer, loss_fn, strategy, global_batch_size, jit_compile
    )
    batch_at = _replica_batches(strategy, x, y, global_batch_size)
    steps = check.positive_int(steps, "steps")
    if checkpoint_dir is not None:
        if not isinstance(checkpoint_dir, (str, os.PathLike)) or not str(
            os.fspath(checkpoint_dir)
        ):
            raise ValueError(
                "`checkpoint_dir` must be a directory path or None. "
                f"Received: checkpoint_dir={checkpoint_dir!r}"
            )
        checkpoint_dir = str(os.fspath(checkpoint_dir))
    checkpoint_every = check.positive_int(checkpoint_every, "checkpoint_every")
    max_to_keep = check.positive_int(max_to_keep, "max_to_keep", True)
    if callback is not None and not callable(callback):
        raise ValueError(
            "`callback` must be callable, `callback(step, loss)`, or None. "
            f"Received: callback={callback!r}"
        )
    step_fn = make_train_step(
        model, optimizer, loss_fn, strategy, global_batch_size, jit_compile
    )
    manager = write_dir = None
    with strategy.scope():
        done = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
    if checkpoint_dir is not None:
        checkpoint = tf.train.Checkpoint(
            model=model, optimizer=optimizer, step=done
        )
        write_dir = _checkpoint_write_dir(strategy, checkpoint_dir)
        manager = tf.train.CheckpointManager(
            checkpoint, write_dir, max_to_keep=max_to_keep
        )
        # Every worker restores the chief's checkpoint.
        latest = tf.train.latest_checkpoint(checkpoint_dir)
        if latest:
            checkpoint.restore(latest)
    losses = []
    while int(done.numpy()) < steps:
        step = int(done.numpy())
        loss = float(step_fn(batch_at(step)).numpy())
        done.assign_add(1)
        losses.append(loss)
        if callback is not None:
            callback(step + 1, loss)
        if manager is not None and (
            (step + 1) % checkpoint_every == 0 or step + 1 == steps
        ):
            manager.save(checkpoint_number=step + 1)
            if write_dir != checkpoint_dir:
                shutil.rmtree(write_dir, ignore_errors=True)
    return losses


def _checkpoint_write_dir(strategy, checkpoint_dir):
    """The chief writes to `checkpoint_dir`; worker `i > 0` to
    `checkpoint_dir/../.workertemp_<i>` (removed after each save)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return checkpoint_dir
    is_chief = resolver.task_type == "chief" or (
        resolver.task_type == "worker"
        and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict()
    )
    if is_chief:
        return checkpoint_dir
    parent = os.path.dirname(os.path.abspath(checkpoint_dir))
    return os.path.join(parent, f".workertemp_{resolver.task_id}")
