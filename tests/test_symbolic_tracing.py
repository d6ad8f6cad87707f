"""The layers and models trace with symbolic sizes: `torch.export.export`
(the entry to ExecuTorch, to LiteRT's PyTorch converter and to
`torch.onnx.export(dynamo=True)`) under the PyTorch backend, and
`jax.export` under JAX, with a dynamic batch (and a dynamic length where
the model takes any). Their shape checks compare static sizes only: a
symbolic size (a `SymInt`, a JAX dimension expression) is known only when
the graph runs (`cvattn_keras._validation.static_size`).

The traced programs are run on another batch (and length) than the one
they were traced with and compared with the model. Under TensorFlow,
`tf.function` traces with unknown sizes (`None`) throughout the suite,
so this module is skipped there.
"""

import keras
import numpy as np
import pytest
from models import all_blocks_inputs
from models import all_blocks_model
from models import all_variants_inputs
from models import all_variants_model

import cvattn_keras as cvk

BACKEND = keras.backend.backend()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        BACKEND not in ("torch", "jax"),
        reason="torch.export and jax.export (TensorFlow traces with None "
        "sizes throughout the suite)",
    ),
]

# tests/test_models.py's small sizes.
SMALL = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(2, 4),
    frontend_kernel_sizes=(3, 3),
)

# The traced program computes what the model computes, in the same ops:
# 0 measured under torch.export, 1e-6 under jax.export (XLA fuses).
ATOL = 1e-5


def _classifier(rng):
    """Dynamic batch and length (`frames=None`)."""
    model = cvk.models.music_classifier(frames=None, bins=10, notes=4, **SMALL)
    trace = [rng.standard_normal((3, 6, 20)).astype("float32")]
    run = [rng.standard_normal((2, 9, 20)).astype("float32")]
    return model, trace, run, True


def _generator(rng):
    model = cvk.models.music_generator(
        source_frames=6, target_frames=4, bins=10, notes=4, **SMALL
    )

    def inputs(batch):
        return [
            rng.standard_normal((batch, 6, 20)).astype("float32"),
            (rng.random((batch, 4, 4)) < 0.5).astype("float32"),
        ]

    return model, inputs(3), inputs(2), False


def _waveform(rng):
    stft = cvk.layers.ComplexSTFT(64, 16, bins=(0, 24))
    model = cvk.models.music_classifier(frames=6, notes=4, stft=stft, **SMALL)
    length = model.inputs[0].shape[1]
    trace = [rng.standard_normal((3, length)).astype("float32")]
    run = [rng.standard_normal((2, length)).astype("float32")]
    return model, trace, run, False


def _blocks(rng):
    inputs = all_blocks_inputs(rng)
    return all_blocks_model(), inputs, [x[:2] for x in inputs], False


def _variants(rng):
    """Every attention variant under every mask, dynamic batch and
    lengths (all three inputs' axis 1 differ: T, S, S)."""
    trace = all_variants_inputs(rng, 3, 5, 7)
    run = all_variants_inputs(rng, 4, 6, 3)
    return all_variants_model(), trace, run, True


MODELS = {
    "classifier": _classifier,
    "generator": _generator,
    "waveform": _waveform,
    "blocks": _blocks,
    "variants": _variants,
}


def _call(model, arrays):
    outputs = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    return [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(outputs)]


def _torch_export(model, trace, dynamic_length):
    import torch

    class Forward(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, inputs):
            return self.model(
                inputs if len(inputs) > 1 else inputs[0], training=False
            )

    batch = torch.export.Dim("batch", min=1, max=1024)
    lengths = {}

    def axes(index, array):
        spec = {0: batch}
        if dynamic_length and array.ndim >= 2:
            # One length per distinct static length of the traced inputs.
            size = array.shape[1]
            if size not in lengths:
                lengths[size] = torch.export.Dim(f"length_{index}", max=512)
            spec[1] = lengths[size]
        return spec

    dynamic_shapes = ([axes(i, x) for i, x in enumerate(trace)],)
    program = torch.export.export(
        Forward(model),
        ([torch.as_tensor(x) for x in trace],),
        dynamic_shapes=dynamic_shapes,
    )
    module = program.module()

    def run(arrays):
        outputs = module([torch.as_tensor(x) for x in arrays])
        return [x.detach().cpu().numpy() for x in keras.tree.flatten(outputs)]

    return run


def _jax_export(model, trace, dynamic_length):
    import jax
    from jax import export

    names = {}

    def shape(array):
        dims = ["b"] + [str(d) for d in array.shape[1:]]
        if dynamic_length and array.ndim >= 2:
            dims[1] = names.setdefault(array.shape[1], f"t{len(names)}")
        return ", ".join(dims)

    shapes = [shape(x) for x in trace]
    scope = export.SymbolicScope()
    specs = [
        jax.ShapeDtypeStruct(
            export.symbolic_shape(text, scope=scope), np.dtype(x.dtype)
        )
        for text, x in zip(shapes, trace)
    ]
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def forward(trainable, non_trainable, inputs):
        outputs, _ = model.stateless_call(
            trainable,
            non_trainable,
            inputs if len(inputs) > 1 else inputs[0],
            training=False,
        )
        return outputs

    exported = export.export(jax.jit(forward))(trainable, non_trainable, specs)

    def run(arrays):
        outputs = exported.call(trainable, non_trainable, list(arrays))
        return [np.asarray(x) for x in keras.tree.flatten(outputs)]

    return run


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_trace_with_symbolic_sizes(rng, name):
    model, trace, run, dynamic_length = MODELS[name](rng)
    exporter = _torch_export if BACKEND == "torch" else _jax_export
    program = exporter(model, trace, dynamic_length)
    got, want = program(run), _call(model, run)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=ATOL)


def test_static_shape_checks_still_run_eagerly():
    """The checks skip symbolic sizes only: static mismatches still raise."""
    layer = cvk.layers.ComplexMultiHeadAttention(2, 3)
    query = np.zeros((2, 4, 6), "float32")
    with pytest.raises(ValueError, match="same batch size"):
        layer(query, np.zeros((3, 5, 6), "float32"))
    with pytest.raises(ValueError, match="`attention_mask` must have"):
        layer(query, query, attention_mask=np.ones((2, 4, 5), bool))
