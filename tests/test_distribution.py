"""cvattn_keras.distribution: the layout map, TF_CONFIG checks, and
distributed training against one device.

The distributed runs happen in subprocesses (tests/distributed_workers/),
because devices must be configured before TensorFlow or JAX starts (2
logical CPU devices, 2 forced host devices, or one process per worker).
Every subprocess binds 127.0.0.1 only, runs under a timeout and is killed by
its process id in a `finally` block. Each prints one `RESULT {json}` line.

Tolerances. The runs differ from one device only in the order of float32
sums, which 3 SGD-momentum steps (moving the weights by O(1) relative)
amplify. Two measures (tests/distributed_workers/common.py):
- per layer, max |w - w_1| / max |w_1| over each layer's variables:
  < 1e-5, the issue's target (measured 1.6e-7 to 1.7e-6; printed with -s);
- per variable, max |w - w_1| / max(max |w_1|, 1e-3): < 1e-4. Every
  kernel stays below 1e-5; the small query/key biases (1e-3 to 1e-2) of
  the APAtt layer, whose phase A / |A| is sensitive to rounding, vary from
  run to run under MultiWorkerMirroredStrategy (its all-reduce order is
  not fixed) and reached 5.3e-5 there (below 1e-5 in the other runs).
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from cvattn_keras import distribution
from cvattn_keras import models

WORKERS = os.path.join(os.path.dirname(__file__), "distributed_workers")
sys.path.insert(0, WORKERS)

import common  # noqa: E402

TOLERANCE = 1e-5  # per layer, see the module docstring

# The tests that start worker processes give each worker its own backend
# (and devices), whatever backend runs pytest: CI runs them once, in its
# run under the default backend, not again under JAX.
own_processes = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="its worker processes pick their own backends; run once, under "
    "the default backend",
)
VARIABLE_TOLERANCE = 1e-4  # per variable, see the module docstring


def _check(comparison, what):
    assert comparison["per_layer"] < TOLERANCE, (what, comparison)
    assert comparison["per_variable"] < VARIABLE_TOLERANCE, (what, comparison)


def _check_each_against(reference, paths, label):
    """Each worker's saved weights (with their names) against one
    device's."""
    single = common.load_weights(reference)
    for path in paths:
        weights = common.load_weights(path)
        with open(str(path) + ".names.json") as f:
            names = json.load(f)
        comparison = common.compare(weights, single, names)
        print(f"{label}, {path.name}: {comparison}")
        _check(comparison, path.name)


TIMEOUT = 300  # seconds, for any one worker process


# ----------------------------------------------------------------------
# Subprocess helpers.
# ----------------------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra):
    env = dict(os.environ)
    for name in ("TF_CONFIG", "XLA_FLAGS", "KERAS_BACKEND"):
        env.pop(name, None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONWARNINGS"] = "ignore"
    env.update(extra)
    return env


def _start(script, *args, log=None, **env):
    return subprocess.Popen(
        [sys.executable, os.path.join(WORKERS, script), *map(str, args)],
        stdout=log or subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(**env),
        text=True,
    )


def _stop(process):
    """Kills `process` by its id if it is still running."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()


def _result(output):
    lines = [x for x in output.splitlines() if x.startswith("RESULT ")]
    assert lines, f"the worker printed no RESULT:\n{output[-4000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


def _run(script, *args, **env):
    """Runs one worker to the end; returns its RESULT."""
    process = _start(script, *args, **env)
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    finally:
        _stop(process)
    assert process.returncode == 0, output[-4000:]
    return _result(output)


def _run_all(commands, timeout=TIMEOUT):
    """Starts `(script, args, env)` processes together; waits for all;
    returns their (returncode, output)."""
    processes = []
    try:
        for script, args, env in commands:
            processes.append(_start(script, *args, **env))
        deadline = time.monotonic() + timeout
        outputs = []
        for process in processes:
            left = max(1.0, deadline - time.monotonic())
            outputs.append(process.communicate(timeout=left)[0])
        return [(p.returncode, o) for p, o in zip(processes, outputs)]
    finally:
        for process in processes:
            _stop(process)


# ----------------------------------------------------------------------
# get_layout_map.
# ----------------------------------------------------------------------


def _mesh(shape=(1, 1), names=("batch", "model")):
    devices = keras.distribution.list_devices()[:1] * int(np.prod(shape))
    return keras.distribution.DeviceMesh(shape, names, devices)


def _intended(path):
    """The layout the docstring of get_layout_map promises for `path`."""
    layer, _, name = path.rpartition("/")
    layer = layer.rpartition("/")[2]
    kind, _, part = name.partition("_")
    if part not in ("real", "imag") or kind not in ("kernel", "bias"):
        return None
    column = ("query", "key", "value", "feedforward_in")
    row = ("attention_output", "feedforward_out")
    if layer in column or layer.endswith("head_dense"):
        return ("batch", "model") if kind == "kernel" else ("model",)
    if layer in row or layer.endswith("head_notes"):
        return ("model", "batch") if kind == "kernel" else None
    if "conv" in layer:
        return (None, None, "model") if kind == "kernel" else ("model",)
    return ("batch", "model") if kind == "kernel" else None


def test_layout_map_shards_every_complex_kernel_of_the_classifier():
    model = models.music_classifier(
        frames=8,
        bins=16,
        notes=8,
        embed_dim=16,
        num_heads=2,
        num_layers=2,
        head_dim=16,
        frontend_filters=(4, 8),
        frontend_kernel_sizes=(6, 3),
    )
    layout_map = distribution.get_layout_map(_mesh())
    kernels = 0
    for variable in model.weights:
        path = variable.path
        layout = layout_map[path]  # raises if two keys match
        intended = _intended(path)
        if intended is None:
            assert layout is None, path
            continue
        assert layout is not None, f"no key matches {path}"
        assert tuple(layout.axes) == intended, path
        assert len(layout.axes) == len(variable.shape), path
        kernels += path.endswith("kernel_real")
    # 2 convs, embedding, 2 x (q, k, v, o, ffn in, ffn out), head 2.
    assert kernels == 2 + 1 + 2 * 6 + 2
    # The norms, the batch norm's statistics and the readout: replicated.
    for path in (
        "encoder_0/self_attention_norm/w0",
        "encoder_0/feedforward_norm/bias_real",
        "frontend/norm_0/moving_mean_real",
        "frontend/norm_1/w0",
        "note_logits/kernel",
    ):
        assert layout_map[path] is None


def test_layout_map_custom_axis_names_and_nesting():
    mesh = _mesh(names=("data", "tensor"))
    layout_map = distribution.get_layout_map(
        mesh, model_parallel_dim_name="tensor", data_parallel_dim_name="data"
    )
    nested = "outer/block/encoder_3/self_attention/value/kernel_imag"
    assert tuple(layout_map[nested].axes) == ("data", "tensor")
    assert tuple(layout_map["complex_conv1d/kernel_real"].axes) == (
        None,
        None,
        "tensor",
    )
    assert layout_map.device_mesh is mesh


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        ({"model_parallel_dim_name": "tensor"}, "model_parallel_dim_name"),
        ({"data_parallel_dim_name": "data"}, "data_parallel_dim_name"),
    ],
)
def test_layout_map_rejects_a_mesh_without_the_axis(kwargs, argument):
    with pytest.raises(ValueError, match=argument) as info:
        distribution.get_layout_map(_mesh(), **kwargs)
    assert "['batch', 'model']" in str(info.value)


def test_layout_map_rejects_a_non_mesh_and_equal_axes():
    with pytest.raises(ValueError, match="device_mesh"):
        distribution.get_layout_map(("batch", "model"))
    with pytest.raises(ValueError, match="must differ"):
        distribution.get_layout_map(_mesh(), model_parallel_dim_name="batch")


# ----------------------------------------------------------------------
# TF_CONFIG.
# ----------------------------------------------------------------------


def _config(**task):
    cluster = {"worker": ["127.0.0.1:2001", "127.0.0.1:2002"]}
    return json.dumps({"cluster": cluster, "task": task})


def test_tf_config_accepts_a_cluster_and_none():
    assert distribution.tf_config({}) is None
    assert distribution.tf_config({"TF_CONFIG": " "}) is None
    config = distribution.tf_config(
        {"TF_CONFIG": _config(type="worker", index=1)}
    )
    assert config["task"] == {"type": "worker", "index": 1}


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        json.dumps({"task": {"type": "worker", "index": 0}}),
        json.dumps({"cluster": {"worker": []}, "task": {}}),
        json.dumps(
            {
                "cluster": {"worker": ["localhost"]},
                "task": {"type": "worker", "index": 0},
            }
        ),
        _config(type="worker", index=2),
        _config(type="worker", index=-1),
        _config(type="ps", index=0),
        _config(type="worker"),
    ],
)
def test_tf_config_rejects_what_cannot_be_used(text):
    with pytest.raises(ValueError, match="TF_CONFIG") as info:
        distribution.tf_config({"TF_CONFIG": text})
    assert "Received: TF_CONFIG=" in str(info.value)


def test_tf_config_rejects_an_environ_that_is_not_a_mapping():
    with pytest.raises(ValueError, match="environ='TF_CONFIG'"):
        distribution.tf_config("TF_CONFIG")
    with pytest.raises(ValueError, match="TF_CONFIG=5"):
        distribution.tf_config({"TF_CONFIG": 5})


def _small_problem():
    """A built one-layer model, an SGD optimizer (not built), 8 examples
    and a valid set of `train` arguments for the default strategy."""
    import tensorflow as tf

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.1)
    rng = np.random.default_rng(0)
    data = dict(
        x=rng.standard_normal((8, 4)).astype("float32"),
        y=rng.standard_normal((8, 1)).astype("float32"),
    )
    arguments = dict(
        strategy=tf.distribute.get_strategy(),
        optimizer=optimizer,
        loss_fn=keras.losses.mean_squared_error,
        global_batch_size=4,
        steps=1,
    )
    return model, optimizer, data, arguments


# Each bad value of an argument of make_train_step (and train).
_BAD_STEP_ARGUMENTS = [
    ("global_batch_size", 0),
    ("global_batch_size", 2.5),
    ("global_batch_size", "4"),
    ("global_batch_size", True),
    ("optimizer", None),
    ("optimizer", "sgd"),
    ("loss_fn", None),
    ("loss_fn", "mse"),
    ("strategy", None),
    ("jit_compile", "yes"),
    ("jit_compile", None),
]


@pytest.mark.tensorflow_only(reason="tf.distribute")
@pytest.mark.parametrize("name, value", _BAD_STEP_ARGUMENTS)
def test_make_train_step_checks_its_arguments(name, value):
    """A ValueError naming the argument and the value, before the
    optimizer is built."""
    model, optimizer, _, arguments = _small_problem()
    arguments.pop("steps")
    arguments[name] = value
    with pytest.raises(ValueError, match=re.escape(f"{name}={value!r}")):
        distribution.make_train_step(model, **arguments)
    assert not optimizer.built


@pytest.mark.tensorflow_only(reason="tf.distribute")
def test_make_train_step_needs_a_built_model():
    _, optimizer, _, arguments = _small_problem()
    arguments.pop("steps")
    unbuilt = keras.Sequential([keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="`model` must be built"):
        distribution.make_train_step(unbuilt, **arguments)
    with pytest.raises(ValueError, match="model=None"):
        distribution.make_train_step(None, **arguments)
    assert not optimizer.built


@pytest.mark.tensorflow_only(reason="tf.distribute")
def test_train_with_the_small_problem_trains_and_checkpoints(tmp_path):
    """The control of the test below: its valid arguments train (the
    weights change, one loss per step, NumPy ints accepted) and save."""
    model, optimizer, data, arguments = _small_problem()
    before = [np.array(w) for w in model.get_weights()]
    arguments.update(steps=np.int64(2), checkpoint_every=np.int32(1))
    losses = distribution.train(
        model, **data, **arguments, checkpoint_dir=str(tmp_path)
    )
    assert len(losses) == 2 and optimizer.built
    assert any(
        not np.array_equal(w, old)
        for w, old in zip(model.get_weights(), before)
    )
    assert any(tmp_path.iterdir())


@pytest.mark.tensorflow_only(reason="tf.distribute")
@pytest.mark.parametrize(
    "name, value, match",
    [(name, value, None) for name, value in _BAD_STEP_ARGUMENTS]
    + [
        ("steps", 2.5, None),  # ran 3 steps
        ("steps", -1, None),  # returned []
        ("steps", 0, None),
        ("steps", "3", None),  # TypeError: '<' not supported
        ("steps", None, None),
        ("checkpoint_every", 0, None),  # ZeroDivisionError after a step
        ("checkpoint_every", 1.5, None),
        ("max_to_keep", 0, None),
        ("max_to_keep", "2", None),
        ("checkpoint_dir", 5, None),
        ("checkpoint_dir", "", None),
        ("callback", "print", None),
        ("model", "model", None),
        ("global_batch_size", 16, "at least one global batch"),
        ("x", np.zeros((6, 4), "float32"), "same number of examples"),
        ("y", np.zeros((6, 1), "float32"), "same number of examples"),
        ("y", 1.0, "`y` must be an array"),
    ],
)
def test_train_rejects_a_bad_argument_before_the_first_step(
    tmp_path, name, value, match
):
    """Issue 22: each bad value raises a ValueError naming the argument
    and the value before anything changes: the weights and the optimizer
    are untouched and no checkpoint is written. (The same arguments,
    corrected, train: the test above.)"""
    model, optimizer, data, arguments = _small_problem()
    checkpoints = tmp_path / "checkpoints"
    arguments = {**data, **arguments, "checkpoint_dir": str(checkpoints)}
    before = [np.array(w) for w in model.get_weights()]
    bad = {**arguments, name: value}
    target = bad.pop("model", model)
    pattern = match or re.escape(f"{name}={value!r}")
    with pytest.raises(ValueError, match=pattern):
        distribution.train(target, **bad)
    for weight, old in zip(model.get_weights(), before):
        np.testing.assert_array_equal(weight, old)
    assert not optimizer.built
    assert not checkpoints.exists() or not any(checkpoints.iterdir())


# ----------------------------------------------------------------------
# The TPU code path, as far as a CPU can show it.
# ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.tensorflow_only(reason="traces a tf.function graph")
def test_train_step_graph_is_xla_compilable_with_static_shapes():
    """The custom step compiled with jit_compile=True on one device: no
    host ops (PyFunc), every tensor shape fully known, and it runs."""
    import tensorflow as tf

    x, keep, y = common.data(batches=1)
    strategy = tf.distribute.get_strategy()
    model = common.build_model()
    optimizer = keras.optimizers.SGD(0.05)
    step = distribution.make_train_step(
        model,
        optimizer,
        lambda t, p: keras.losses.binary_crossentropy(t, p, from_logits=True),
        strategy,
        common.GLOBAL_BATCH,
        jit_compile=True,
    )
    batch = ((tf.constant(x), tf.constant(keep)), tf.constant(y))
    loss = float(step(batch))
    assert np.isfinite(loss)
    graph = step.get_concrete_function(batch).graph
    ops = graph.get_operations()
    host_ops = {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    assert not [op.type for op in ops if op.type in host_ops]
    # Every data tensor (float or bool) has a static shape. Integer
    # index tensors such as BroadcastGradientArgs' reduction axes have an
    # unknown length in the graph but are computed from static shapes,
    # so XLA folds them to compile-time constants.
    dynamic = [
        (op.name, t.shape)
        for op in ops
        for t in op.outputs
        if (t.dtype.is_floating or t.dtype.is_bool)
        and (t.shape.rank is None or not t.shape.is_fully_defined())
    ]
    assert sum(len(op.outputs) for op in ops) > 1000  # the whole step
    assert not dynamic, dynamic[:10]


# ----------------------------------------------------------------------
# Distributed training equals one device.
# ----------------------------------------------------------------------


@pytest.mark.slow
@own_processes
def test_jax_data_and_model_parallel_match_one_device():
    """2 forced host devices: DataParallel and ModelParallel with
    get_layout_map; XLA with steps_per_execution=3 on one device."""
    result = _run("jax_parallel.py")
    print("jax:", {k: v for k, v in result.items() if k != "sharded"})
    assert result["change"] > 1e-2  # training moved the weights
    for what in ("steps_per_execution", "data_parallel", "model_parallel"):
        _check(result[what], what)
    sharded = result["sharded"]
    assert sharded["attention_2/query/kernel_real"] == ["batch", "model"]
    assert sharded["encoder_0/feedforward_out/kernel_imag"] == [
        "model",
        "batch",
    ]


@pytest.mark.slow
@own_processes
def test_tf_mirrored_strategy_matches_one_device():
    """fit and the custom loop under MirroredStrategy over 2 logical CPU
    devices; fit with jit_compile + steps_per_execution on one device."""
    result = _run("tf_mirrored.py")
    print("tf:", result)
    assert result["replicas"] == 2
    assert result["change"] > 1e-2
    for what in (
        "mirrored_fit",
        "custom_loop_mirrored",
        "xla_steps_per_execution",
    ):
        _check(result[what], what)
    if not result["synchronized_bn"]:
        pytest.skip(
            "ComplexBatchNormalization(synchronized=...) does not exist "
            "yet: the model used per-replica batch statistics"
        )


@pytest.mark.slow
@own_processes
def test_tf_multiworker_resumes_after_a_killed_worker(tmp_path):
    """MultiWorkerMirroredStrategy, 2 workers on 127.0.0.1, the custom loop
    of cvattn_keras.distribution.train: worker 1 dies after step 2 (its
    checkpoint written), worker 0 is killed, both are restarted and resume
    from the checkpoint; the result equals one uninterrupted device."""
    checkpoints = tmp_path / "checkpoints"
    ports = [_free_port(), _free_port()]

    def tf_config(index):
        cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
        task = {"type": "worker", "index": index}
        return json.dumps({"cluster": cluster, "task": task})

    out = [tmp_path / f"worker_{i}.npz" for i in range(2)]
    # One device, uninterrupted: the reference.
    reference = tmp_path / "single.npz"
    _run("tf_multiworker.py", tmp_path / "single_ckpt", reference)

    # Interrupted: worker 1 dies after the checkpoint of step 2.
    chief = _start(
        "tf_multiworker.py", checkpoints, out[0], TF_CONFIG=tf_config(0)
    )
    try:
        crashed = _start(
            "tf_multiworker.py",
            checkpoints,
            out[1],
            2,
            TF_CONFIG=tf_config(1),
        )
        try:
            output, _ = crashed.communicate(timeout=TIMEOUT)
        finally:
            _stop(crashed)
        assert crashed.returncode == 17, output[-4000:]
        # Wait for the chief's checkpoint of step 2, then kill the chief.
        deadline = time.monotonic() + 60
        state = checkpoints / "checkpoint"
        while time.monotonic() < deadline and not (
            state.exists() and "ckpt-2" in state.read_text()
        ):
            time.sleep(0.2)
    finally:
        _stop(chief)
    assert (checkpoints / "checkpoint").exists()
    assert "ckpt-2" in (checkpoints / "checkpoint").read_text()
    assert not out[0].exists()  # it did not finish

    # Restarted: both resume from step 2 and run steps 3 and 4.
    results = _run_all(
        [
            (
                "tf_multiworker.py",
                (checkpoints, out[i]),
                {"TF_CONFIG": tf_config(i)},
            )
            for i in range(2)
        ]
    )
    for code, output in results:
        assert code == 0, output[-4000:]
        result = _result(output)
        assert result["replicas"] == 2
        assert result["steps_run"] == 2  # resumed, not restarted
        assert re.search(r"^step 3 loss", output, re.M)
    _check_each_against(reference, out, "multiworker, resumed")


@pytest.mark.slow
@own_processes
def test_tf_multiworker_rejects_a_bad_tf_config(tmp_path):
    process = _start(
        "tf_multiworker.py",
        tmp_path,
        tmp_path / "out.npz",
        TF_CONFIG='{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {}}',
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    finally:
        _stop(process)
    assert process.returncode != 0
    assert "ValueError: `TF_CONFIG`" in output


@pytest.mark.slow
@own_processes
def test_jax_multiprocess_data_parallel_matches_one_device(tmp_path):
    """keras.distribution.initialize with 2 processes on 127.0.0.1 and
    DataParallel across them (one CPU device each)."""
    port = _free_port()
    out = [tmp_path / f"process_{i}.npz" for i in range(2)]
    reference = tmp_path / "single.npz"
    results = _run_all(
        [("jax_multiprocess.py", (port, i, out[i]), {}) for i in range(2)]
        + [("jax_multiprocess.py", (0, -1, reference), {})]
    )
    for code, output in results:
        assert code == 0, output[-4000:]
    assert [_result(o)["devices"] for _, o in results] == [2, 2, 1]
    _check_each_against(reference, out, "jax multiprocess")


@pytest.mark.slow
@own_processes
def test_model_parallel_attention_communicates_like_a_real_one():
    """Compiled HLO on 2 forced host devices: ComplexMultiHeadAttention
    with get_layout_map needs the collectives of keras' MultiHeadAttention
    of the same real width with the Megatron layout (one all-reduce of
    the output), forward and training step."""
    result = _run("hlo_collectives.py", "--only", "MultiHeadAttention")
    rows = {(r["case"].split(",")[0], r["pass"]): r for r in result["rows"]}
    for kind in ("forward", "train step"):
        complex_row = rows[("ComplexMultiHeadAttention E=64", kind)]
        real_row = rows[("real MultiHeadAttention E=128", kind)]
        for op in ("all-gather", "all-to-all", "collective-permute"):
            assert complex_row[op]["count"] == 0, (kind, op, complex_row)
        assert complex_row["all-reduce"] == real_row["all-reduce"]


@pytest.mark.slow
@own_processes
def test_model_parallel_complex_dense_communicates_like_a_real_one():
    """ComplexDense 64->128 against a real Dense 128->256 on 2 forced host
    devices. With the input axis of kernel_real/kernel_imag sharded (row
    parallel) it needs exactly the real layer's one all-reduce of the
    output. With the units axis sharded it needs one all-gather of its
    output and nothing else: a units shard of [Re | Im] is not one
    contiguous block of the stacked output (a real Dense keeps its output
    sharded)."""
    result = _run(
        "hlo_collectives.py",
        "--only",
        "real Dense 128->256, inputs|ComplexDense 64->128, kernel",
    )
    rows = {(r["case"], r["pass"]): r for r in result["rows"]}
    others = ("all-to-all", "collective-permute", "reduce-scatter")
    for kind in ("forward", "train step"):
        rows_in = rows[
            ("ComplexDense 64->128, kernel_real/imag inputs sharded", kind)
        ]
        real = rows[("real Dense 128->256, inputs sharded", kind)]
        for op in ("all-reduce", "all-gather") + others:
            assert rows_in[op] == real[op], (kind, op, rows_in, real)
        rows_units = rows[
            ("ComplexDense 64->128, kernel_real/imag units sharded", kind)
        ]
        assert rows_units["all-gather"]["count"] == 1, (kind, rows_units)
        output_bytes = 8 * 16 * 256 * 4  # batch, length, 2 * units, float32
        assert rows_units["all-gather"]["bytes"] == output_bytes
        for op in others:
            assert rows_units[op]["count"] == 0, (kind, op, rows_units)


# ----------------------------------------------------------------------
# examples/train_distributed.py
# ----------------------------------------------------------------------

EXAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "examples", "train_distributed.py"
)


def _example(*args, **env):
    process = subprocess.Popen(
        [sys.executable, EXAMPLE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(**env),
        text=True,
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    finally:
        _stop(process)
    return process.returncode, output


def _ap(output):
    match = re.search(r"held-out micro-averaged AP: ([0-9.]+)", output)
    assert match, output[-4000:]
    return float(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize("strategy, replicas", [("mirrored", 2)])
@own_processes
def test_example_smoke_prints_batches_throughput_and_ap(strategy, replicas):
    code, output = _example("--strategy", strategy, "--smoke")
    assert code == 0, output[-4000:]
    per_replica = 8 // replicas
    assert (
        f"model replicas: {replicas}, per-replica batch: {per_replica}, "
        "global batch: 8"
    ) in output
    assert re.search(r"epoch 2: loss [0-9.]+, [0-9]+ examples/s", output)
    if strategy == "mirrored":
        # The weights of one device, to float rounding and to the front
        # end's synchronized reference batch norm, whose unbiased variance
        # divides by the replicas' mean count (ComplexBatchNormalization:
        # keras.ops cannot see the number of replicas): a relative change
        # of (K - 1) / N in the variances, 8e-4 here (N = 8 x 16 frames x
        # 14 bins, K = 2), which moves the smoke run's AP by 1.6e-3.
        code, single = _example("--strategy", "single", "--smoke")
        assert code == 0, single[-4000:]
        assert abs(_ap(output) - _ap(single)) < 4e-3
    assert 0 < _ap(output) <= 1


@pytest.mark.slow
@own_processes
def test_example_rejects_a_bad_tf_config():
    code, output = _example(
        "--strategy", "multiworker", "--smoke", TF_CONFIG='{"task": 1}'
    )
    assert code != 0
    assert "ValueError: `TF_CONFIG`" in output
