"""Builders for image reconstruction from undersampled k-space (MRI).

Every model maps what a scanner's accelerated acquisition gives to the
image, through the same three named inputs (numpy's k-space order, norm
"ortho", as `cvattn_keras.datasets.synthetic_mri` returns them):

- `zero_filled` `(B, H, W, 2C)`: the stacked zero-filled image,
  `ifft2(mask * kspace)`;
- `masked_kspace` `(B, H, W, 2C)`: the measured k-space, zero where not
  sampled;
- `mask` `(B, 1, W)`: the sampled columns (phase-encode lines), 1 or 0
  (`(B, H, W)` with `mask="full"`, any Cartesian pattern).

Each is a network `f` in a residual around the zero-filled image followed
by k-space data consistency (`layers.ComplexDataConsistency`): the
output's k-space equals the measured samples where the mask is 1, and
`f` only fills in the rest. With `cascades=K` the network and the data
consistency are unrolled `K` times with weights of their own (Schlemper
et al.'s deep cascade, the field's variational-network style):

    x_0 = zero_filled,   x_k = DC(x_{k-1} + f_k(x_{k-1})),   output x_K.

The last layer of every `f_k` starts at zero (its kernel initialised to
zeros), so an untrained model gives the zero-filled image and training
starts from the field's baseline. Measured on random phantoms (64 x 64,
4x): with Glorot-initialised last layers both transformers first learned
to cancel their own random output and stayed at the zero-filled image's
PSNR for 8 epochs; started at zero they gained 2.5-4 dB in as many.

- `mri_transformer`: a complex vision transformer with CAtt over the
  patches (`ComplexPatchEmbedding` with learned 2-D positions,
  `ComplexTransformerEncoder` blocks, `ComplexPatchUnembedding`);
- `complex_unet`: a complex U-Net (`ComplexConv2D`, `ComplexMaxPooling2D`
  or `ComplexAveragePooling2D`, `ComplexConv2DTranspose`, skip
  connections, a complex activation), the baseline the field knows;
- `real_mri_transformer` and `real_unet`: the same architectures on the
  stacked image read as `2C` real channels (`keras.layers`'s attention
  and convolutions), widths chosen for about the same parameter count
  (a complex weight is two reals). Data consistency is a fixed linear
  map of the stacked image, so it applies to a real network's output
  unchanged.

Parameter counts of the defaults (64 x 64 images, one coil; Keras counts
real numbers: a complex weight is two), trainable:

| model                                              | parameters |
| -------------------------------------------------- | ---------- |
| `mri_transformer()`: patch 4, E = 32, 4 heads, 2 blocks | 44,482 |
| `real_mri_transformer()`: width 48                 | 44,018     |
| `complex_unet()`: 8, 16 and 32 complex filters     | 58,642     |
| `real_unet()`: 11, 23 and 45 real filters          | 58,851     |

`tests/test_image_models.py` computes them.

References:
    J. Schlemper, J. Caballero, J. V. Hajnal, A. Price, D. Rueckert, "A
    Deep Cascade of Convolutional Neural Networks for MR Image
    Reconstruction", IPMI 2017 (arXiv 1703.00555).

    J. Zbontar et al., "fastMRI: An Open Dataset and Benchmarks for
    Accelerated MRI", 2018 (arXiv 1811.08839): the U-Net baseline.
"""

import keras
from keras import ops

from cvattn_keras import _attention_args as core
from cvattn_keras import _validation as check
from cvattn_keras import layers as cl
from cvattn_keras.layers import _image
from cvattn_keras.layers import transformer as _transformer
from cvattn_keras.layers._options import activation_layer
from cvattn_keras.layers._options import check_activation
from cvattn_keras.models import _real

__all__ = [
    "MASKS",
    "complex_unet",
    "mri_transformer",
    "real_mri_transformer",
    "real_unet",
]

MASKS = ("columns", "full")
"""The models' `mask` input: `"columns"` `(B, 1, W)` (sampled
phase-encode lines, fastMRI's masks) or `"full"` `(B, H, W)`."""

_POOLINGS = ("max", "average")


# --------------------------------------------------------------------------
# Arguments.
# --------------------------------------------------------------------------


def _image_size(image_size):
    """`(H, W)` from an int or a pair, each a positive int."""
    return _image.pair(image_size, "image_size")


def _mask(mask):
    if mask not in MASKS:
        raise ValueError(
            f"`mask` must be one of {list(MASKS)}. Received: mask={mask!r}"
        )
    return mask


def _divisible(size, by, name, why):
    """Raises unless both sides of `size` are multiples of `by`."""
    for side, factor in zip(size, by):
        if side % factor:
            raise ValueError(
                f"`image_size` {size} must be a multiple of {why} "
                f"{tuple(by)} on both sides. Received: image_size={size}, "
                f"{name}"
            )


def _inputs(size, channels, data_consistency, mask):
    """The model's named inputs, the zero-filled image first."""
    height, width = size
    zero_filled = keras.Input((height, width, 2 * channels), name="zero_filled")
    if not data_consistency:
        return [zero_filled]
    kspace = keras.Input((height, width, 2 * channels), name="masked_kspace")
    sampled = keras.Input(
        (1, width) if mask == "columns" else (height, width), name="mask"
    )
    return [zero_filled, kspace, sampled]


def _cascade(inputs, network, cascades, data_consistency):
    """`x_k = DC(x_{k-1} + network(x_{k-1}, k))`, `cascades` times, from
    the zero-filled image."""
    x = inputs[0]
    for k in range(cascades):
        x = keras.layers.Add(name=f"residual_{k}")([x, network(x, k)])
        if data_consistency:
            x = cl.ComplexDataConsistency(name=f"data_consistency_{k}")(
                x, inputs[1], inputs[2]
            )
    return x


def _common(image_size, channels, cascades, data_consistency, mask):
    size = _image_size(image_size)
    channels = check.positive_int(channels, "channels")
    cascades = check.positive_int(cascades, "cascades")
    data_consistency = check.boolean(data_consistency, "data_consistency")
    return size, channels, cascades, data_consistency, _mask(mask)


def _model(network, size, channels, cascades, data_consistency, mask, name):
    """The model of every builder: its inputs, `cascades` times `network`
    (`_cascade`) and the reconstruction, as `float32` under any dtype
    policy (a linear cast layer, named `reconstruction`)."""
    inputs = _inputs(size, channels, data_consistency, mask)
    x = _cascade(inputs, network, cascades, data_consistency)
    x = keras.layers.Activation(
        "linear", dtype="float32", name="reconstruction"
    )(x)
    return keras.Model(inputs, x, name=name)


# --------------------------------------------------------------------------
# Transformers.
# --------------------------------------------------------------------------


def _transformer_arguments(size, patch_size, embed_dim, num_heads, num_layers):
    """The transformers' patch, widths and depth, checked; and the grid of
    patches."""
    patch = _image.pair(patch_size, "patch_size")
    _divisible(size, patch, f"patch_size={patch_size!r}", "`patch_size`")
    grid = (size[0] // patch[0], size[1] // patch[1])
    return (
        patch,
        grid,
        check.positive_int(embed_dim, "embed_dim"),
        check.positive_int(num_heads, "num_heads"),
        check.positive_int(num_layers, "num_layers"),
    )


def mri_transformer(
    image_size=64,
    patch_size=4,
    embed_dim=32,
    num_heads=4,
    num_layers=2,
    intermediate_dim=None,
    softmax="real",
    product="inner",
    cascades=1,
    data_consistency=True,
    positions="learned",
    channels=1,
    mask="columns",
    dropout=0.0,
    attention_dropout=0.0,
    layer_norm_epsilon=1e-5,
    name="mri_transformer",
):
    """A complex vision transformer that reconstructs an image from
    undersampled k-space, with data consistency.

    Each cascade `k`: the image `(B, H, W, 2C)` cut into `N = (H / p) (W /
    p)` patches -> `ComplexPatchEmbedding` (each patch times one complex
    matrix, plus learned 2-D positions: `(B, N, 2E)`) -> `num_layers`
    `ComplexTransformerEncoder` blocks (CAtt by default: the softmax of
    `Re <q, k>` over all patches, so every patch sees the aliasing that
    the missing columns spread across the image) ->
    `ComplexPatchUnembedding` (each token back to its `p x p` complex
    patch) -> added to the cascade's input (a residual) -> k-space data
    consistency with `masked_kspace` and `mask`. The output is the last
    cascade's image.

    Layer names: `embedding_{k}`, `encoder_{k}_{i}`, `unembedding_{k}`,
    `residual_{k}`, `data_consistency_{k}` (cascade `k`, block `i`) and
    `reconstruction`.

    Parameters of the default (64 x 64, patch 4: 256 tokens of E = 32
    complex features, 4 heads, 2 layers, one cascade): 44,482 (16,384 of
    them the learned positions), against 44,018 for
    `real_mri_transformer()`.

    Args:
        image_size: the images' `H` and `W`: an int (square) or a pair.
            Defaults to 64.
        patch_size: an int or a pair dividing `image_size`. Defaults to
            4.
        embed_dim: the tokens' complex features `E`.
        num_heads: attention heads of every block; must divide
            `embed_dim`.
        num_layers: encoder blocks per cascade.
        intermediate_dim: the feed-forward width of every block (complex).
            Defaults to `embed_dim`.
        softmax: the attention variant (see
            `layers.ComplexMultiHeadAttention`): `"real"` (CAtt, default),
            `"abs"`, `"absonly"`, `"naive"` or the paper's names.
        product: `"inner"` (default) or `"bilinear"`.
        cascades: how many times network and data consistency are
            unrolled (weights of their own each). Defaults to 1.
        data_consistency: whether each cascade ends with
            `ComplexDataConsistency` (then the model takes the three
            inputs; otherwise `zero_filled` only). Defaults to `True`.
        positions: `ComplexPatchEmbedding`'s `positions`: `"learned"`
            (default), `"sinusoidal"` or `None`.
        channels: the complex channels `C` of an image (coils). Defaults
            to 1.
        mask: `"columns"` (default: the `mask` input is `(B, 1, W)`) or
            `"full"` (`(B, H, W)`).
        dropout: after the feed-forward activation of every block.
        attention_dropout: on the attention weights of every block.
        layer_norm_epsilon: of every block's normalizations.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` taking `[zero_filled, masked_kspace,
        mask]` (also as a dict by those names) and giving the stacked
        image `(B, H, W, 2C)`, float32 (`reconstruction`).

    Example:
        >>> model = mri_transformer(image_size=16, patch_size=4,
        ...                         embed_dim=8, num_heads=2, num_layers=1)
        >>> len(model.inputs), tuple(model.inputs[2].shape)  # the mask
        (3, (None, 1, 16))
        >>> model.output_shape
        (None, 16, 16, 2)
    """
    size, channels, cascades, data_consistency, mask = _common(
        image_size, channels, cascades, data_consistency, mask
    )
    patch, grid, embed_dim, num_heads, num_layers = _transformer_arguments(
        size, patch_size, embed_dim, num_heads, num_layers
    )
    if embed_dim % num_heads:
        raise ValueError(
            "`num_heads` must divide `embed_dim` (the heads share the "
            f"features). Received: num_heads={num_heads}, "
            f"embed_dim={embed_dim}"
        )
    softmax = core.resolve_softmax(softmax)
    product = core.resolve_product(product)
    if positions is not None and positions not in ("learned", "sinusoidal"):
        raise ValueError(
            "`positions` must be 'learned', 'sinusoidal' or None. "
            f"Received: positions={positions!r}"
        )
    layer_norm_epsilon = _transformer._check_layer_norm_epsilon(
        layer_norm_epsilon, "whitening"
    )

    def network(x, k):
        t = cl.ComplexPatchEmbedding(
            patch, embed_dim, positions=positions, name=f"embedding_{k}"
        )(x)
        for i in range(num_layers):
            t = cl.ComplexTransformerEncoder(
                num_heads,
                intermediate_dim=intermediate_dim,
                softmax=softmax,
                product=product,
                dropout=dropout,
                attention_dropout=attention_dropout,
                layer_norm_epsilon=layer_norm_epsilon,
                name=f"encoder_{k}_{i}",
            )(t)
        return cl.ComplexPatchUnembedding(
            patch,
            channels,
            grid=grid,
            kernel_initializer="zeros",
            name=f"unembedding_{k}",
        )(t)

    return _model(
        network, size, channels, cascades, data_consistency, mask, name
    )


@keras.saving.register_keras_serializable(package="cvattn_keras")
class RealPatchPositions(keras.layers.Layer):
    """Learned positions of `real_mri_transformer`: one real vector per
    token, `position` `(N, E)`, added to `(B, N, E)` tokens (ViT's, the
    real counterpart of `ComplexPatchEmbedding(positions="learned")`).
    Not part of the API: a layer of the real baseline, registered so that
    its `.keras` files load with `safe_mode=True`.

    Args:
        initializer: of `position`. Defaults to a normal distribution of
            standard deviation 0.02 (ViT's, as `ComplexPatchEmbedding`).
        **kwargs: base `Layer` arguments.
    """

    def __init__(self, initializer=None, **kwargs):
        if initializer is None:
            initializer = keras.initializers.RandomNormal(stddev=0.02)
        self.initializer = keras.initializers.get(initializer)
        super().__init__(**kwargs)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3 or None in input_shape[1:]:
            raise ValueError(
                "RealPatchPositions expects tokens (batch, tokens, "
                f"features) of known sizes. Received: input_shape="
                f"{input_shape}"
            )
        self.position = self.add_weight(
            name="position",
            shape=input_shape[1:],
            initializer=self.initializer,
        )

    def call(self, inputs):
        return inputs + ops.cast(self.position, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "initializer": keras.initializers.serialize(self.initializer),
        }


def real_mri_transformer(
    image_size=64,
    patch_size=4,
    embed_dim=48,
    num_heads=4,
    num_layers=2,
    intermediate_dim=None,
    cascades=1,
    data_consistency=True,
    channels=1,
    mask="columns",
    dropout=0.0,
    attention_dropout=0.0,
    layer_norm_epsilon=1e-3,
    name="real_mri_transformer",
):
    """A real-valued baseline of `mri_transformer`: the same architecture
    on the stacked image read as `2C` real channels (Re and Im).

    Each cascade: a `Conv2D(embed_dim, p, strides=p)` patch embedding
    (each `p x p x 2C` patch times one real matrix), learned positions
    (`RealPatchPositions`), `num_layers` post-norm encoder blocks
    (`keras.layers.MultiHeadAttention` + add + `LayerNormalization`, then
    Dense -> LeakyReLU(0.01) -> dropout -> Dense + add + norm: the complex
    block's structure and activation), a `Conv2DTranspose(2C, p,
    strides=p)` back to the image (`ComplexPatchUnembedding`'s real
    counterpart), the residual and the data consistency of
    `mri_transformer` (a fixed linear map of the stacked image).

    A complex weight holds two reals, so a width `sqrt(2)` times the
    complex model's gives a comparable count (`12 E^2` reals per complex
    block, `6 E_r^2` per real one): the default 48 for the complex
    default's 32 gives 44,018 parameters against 44,482 (-1%).

    Layer names: `embedding_{k}`, `positions_{k}`,
    `encoder_{k}_{i}_attention`, `encoder_{k}_{i}_norm_1`,
    `encoder_{k}_{i}_in`, `encoder_{k}_{i}_out`, `encoder_{k}_{i}_norm_2`,
    `unembedding_{k}`, `residual_{k}`, `data_consistency_{k}`,
    `reconstruction`.

    Args:
        image_size: as `mri_transformer`'s.
        patch_size: as `mri_transformer`'s.
        embed_dim: the tokens' real features. Defaults to 48.
        num_heads: attention heads; each of width `embed_dim //
            num_heads`.
        num_layers: encoder blocks per cascade.
        intermediate_dim: the feed-forward width. Defaults to
            `embed_dim`.
        cascades: as `mri_transformer`'s.
        data_consistency: as `mri_transformer`'s.
        channels: the complex channels `C` (the network sees `2C` real
            ones).
        mask: as `mri_transformer`'s.
        dropout: after the feed-forward activation.
        attention_dropout: on the attention weights.
        layer_norm_epsilon: of the `LayerNormalization`s, positive.
            Defaults to 1e-3, Keras'.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` with `mri_transformer`'s inputs and
        output.

    Example:
        >>> model = real_mri_transformer(image_size=16, patch_size=4,
        ...                              embed_dim=12, num_heads=2,
        ...                              num_layers=1)
        >>> model.output_shape
        (None, 16, 16, 2)
    """
    size, channels, cascades, data_consistency, mask = _common(
        image_size, channels, cascades, data_consistency, mask
    )
    patch, grid, embed_dim, num_heads, num_layers = _transformer_arguments(
        size, patch_size, embed_dim, num_heads, num_layers
    )
    if embed_dim < num_heads:
        raise ValueError(
            "`embed_dim` must be at least `num_heads` (heads of width "
            f"embed_dim // num_heads). Received: embed_dim={embed_dim}, "
            f"num_heads={num_heads}"
        )
    intermediate_dim = check.positive_int(
        intermediate_dim, "intermediate_dim", allow_none=True
    )
    dropout = check.rate(dropout, "dropout")
    attention_dropout = check.rate(attention_dropout, "attention_dropout")
    layer_norm_epsilon = check.greater_than(
        layer_norm_epsilon, "layer_norm_epsilon"
    )
    layers = keras.layers

    def network(x, k):
        t = layers.Conv2D(
            embed_dim, patch, strides=patch, name=f"embedding_{k}"
        )(x)
        t = layers.Reshape((grid[0] * grid[1], embed_dim))(t)
        t = RealPatchPositions(name=f"positions_{k}")(t)
        for i in range(num_layers):
            prefix = f"encoder_{k}_{i}"
            attention = layers.MultiHeadAttention(
                num_heads,
                embed_dim // num_heads,
                dropout=attention_dropout,
                name=f"{prefix}_attention",
            )
            t = _real.encoder_layer(
                t,
                attention,
                prefix,
                intermediate_dim,
                dropout,
                layer_norm_epsilon,
            )
        t = layers.Reshape(grid + (embed_dim,))(t)
        return layers.Conv2DTranspose(
            2 * channels,
            patch,
            strides=patch,
            kernel_initializer="zeros",
            name=f"unembedding_{k}",
        )(t)

    return _model(
        network, size, channels, cascades, data_consistency, mask, name
    )


# --------------------------------------------------------------------------
# U-Nets.
# --------------------------------------------------------------------------


def _unet_arguments(image_size, filters, depth, pooling):
    size = _image_size(image_size)
    filters = check.positive_int(filters, "filters")
    depth = check.positive_int(depth, "depth")
    factor = 2 ** (depth - 1)
    _divisible(
        size,
        (factor, factor),
        f"depth={depth}",
        f"2 ** (depth - 1) = {factor} (each level halves it)",
    )
    if pooling not in _POOLINGS:
        raise ValueError(
            f"`pooling` must be one of {list(_POOLINGS)}. Received: "
            f"pooling={pooling!r}"
        )
    return size, filters, depth


def _unet(x, depth, width, convolution, activate, pool, up, join, out):
    """The U-Net of every builder: `depth` levels of two 3 x 3 convolutions
    (`width(level)` channels), pooled on the way down, upsampled by a
    transposed convolution on the way up and joined with the skip, a 1 x 1
    convolution to the image's channels (`out`)."""
    skips = []
    for level in range(depth):
        if level:
            x = pool(level)(x)
        for j in range(2):
            x = convolution(width(level), 3, f"down_{level}_conv_{j}")(x)
            x = activate(f"down_{level}_act_{j}")(x)
        skips.append(x)
    for level in reversed(range(depth - 1)):
        x = up(width(level), f"up_{level}_upsample")(x)
        x = join(skips[level], x, width(level), f"up_{level}")
        x = activate(f"up_{level}_act_0")(x)
        x = convolution(width(level), 3, f"up_{level}_conv_1")(x)
        x = activate(f"up_{level}_act_1")(x)
    return out(x)


def _complex_activation(activation):
    """`activation` checked, and a function of a name giving its layer."""
    activation = check_activation(activation)
    return lambda name: activation_layer(activation, name=name)


def complex_unet(
    image_size=64,
    filters=8,
    depth=3,
    activation="crelu",
    pooling="max",
    cascades=1,
    data_consistency=True,
    channels=1,
    mask="columns",
    name="complex_unet",
):
    """A complex U-Net that reconstructs an image from undersampled
    k-space, with data consistency: fastMRI's baseline network, complex.

    Each cascade: `depth` levels of two 3 x 3 `ComplexConv2D` (`"same"`
    padding, `filters * 2**level` complex channels) and a complex
    activation each; between levels on the way down a 2 x 2 complex
    pooling (`"max"`: `ComplexMaxPooling2D`, the value of largest modulus,
    its phase kept; `"average"`: `ComplexAveragePooling2D`); on the way up
    a 2 x 2 `ComplexConv2DTranspose` of stride 2, joined with the skip of
    its level, an activation, a 3 x 3 convolution and an activation; a 1 x
    1 `ComplexConv2D` back to `C` channels; added to the cascade's input
    and made consistent with the measured k-space.

    The join is U-Net's concatenation followed by a 3 x 3 convolution,
    written as the sum of two convolutions, one of each input (`up_{l}_
    skip`, without bias, and `up_{l}_conv_0`): the same arithmetic and
    weights (a convolution of concatenated channels is the sum of the
    convolutions of each part), with no concatenation of stacked tensors
    (which would need re-interleaving real and imaginary parts).

    Parameters of the default (64 x 64, 8, 16 and 32 complex filters):
    58,642, against 58,851 for `real_unet()`.

    Args:
        image_size: the images' `H` and `W`, an int or a pair; multiples
            of `2 ** (depth - 1)`. Defaults to 64.
        filters: complex channels of the first level (doubled at each
            level). Defaults to 8.
        depth: levels, the first at full resolution. Defaults to 3.
        activation: a complex activation: `"crelu"` (default: ReLU of
            each part, Trabelsi et al.'s), `"modrelu"` (a `ModReLU`, a
            learned threshold of the modulus: the phase kept),
            `"split_leaky_relu"`, `"zrelu"` or `"cardioid"`.
        pooling: `"max"` (default) or `"average"`.
        cascades: as `mri_transformer`'s.
        data_consistency: as `mri_transformer`'s.
        channels: the complex channels `C` of an image (coils).
        mask: as `mri_transformer`'s.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` with `mri_transformer`'s inputs and
        output.

    Example:
        >>> model = complex_unet(image_size=16, filters=2, depth=2)
        >>> model.output_shape
        (None, 16, 16, 2)
    """
    size, channels, cascades, data_consistency, mask = _common(
        image_size, channels, cascades, data_consistency, mask
    )
    size, filters, depth = _unet_arguments(size, filters, depth, pooling)
    activate = _complex_activation(activation)
    pool_layer = cl.ComplexMaxPooling2D
    if pooling == "average":
        pool_layer = cl.ComplexAveragePooling2D

    def network(x, k):
        def convolution(width, kernel, label, use_bias=True):
            return cl.ComplexConv2D(
                width,
                kernel,
                padding="same",
                use_bias=use_bias,
                name=f"{label}_{k}",
            )

        def join(skip, x, width, label):
            return keras.layers.Add(name=f"{label}_join_{k}")(
                [
                    convolution(width, 3, f"{label}_skip", False)(skip),
                    convolution(width, 3, f"{label}_conv_0")(x),
                ]
            )

        return _unet(
            x,
            depth,
            lambda level: filters * 2**level,
            convolution,
            lambda label: activate(f"{label}_{k}"),
            lambda level: pool_layer(2, name=f"down_{level}_pool_{k}"),
            lambda width, label: cl.ComplexConv2DTranspose(
                width, 2, strides=2, name=f"{label}_{k}"
            ),
            join,
            lambda h: cl.ComplexConv2D(
                channels,
                1,
                kernel_initializer="zeros",
                name=f"output_{k}",
            )(h),
        )

    return _model(
        network, size, channels, cascades, data_consistency, mask, name
    )


def real_unet(
    image_size=64,
    filters=11.3,
    depth=3,
    pooling="max",
    cascades=1,
    data_consistency=True,
    channels=1,
    mask="columns",
    name="real_unet",
):
    """A real-valued baseline of `complex_unet`: the same U-Net on the
    stacked image read as `2C` real channels.

    `keras.layers.Conv2D` (3 x 3, `"same"`), ReLU, `MaxPooling2D` or
    `AveragePooling2D`, `Conv2DTranspose` (2 x 2, stride 2), U-Net's
    concatenation of the skip, a 1 x 1 convolution to `2C` channels, the
    residual and the data consistency of `complex_unet`. Widths
    `round(sqrt(2) F 2**level)` for the complex model's `F 2**level`
    give about its parameter count: the default `filters=11.3` (8
    `sqrt(2)`, rounded) gives 11, 23 and 45 channels and 58,851
    parameters against the complex default's 58,642 (+0.4%).

    Layer names: `down_{l}_conv_{j}_{k}`, `down_{l}_pool_{k}`,
    `up_{l}_upsample_{k}`, `up_{l}_join_{k}`, `up_{l}_conv_{j}_{k}`,
    `output_{k}`, `residual_{k}`, `data_consistency_{k}`,
    `reconstruction`.

    Args:
        image_size: as `complex_unet`'s.
        filters: real channels of the first level, each level's
            `round(filters * 2**level)` (`filters` may be a float: the
            complex model's times `sqrt(2)`). Defaults to 11.3.
        depth: as `complex_unet`'s.
        pooling: as `complex_unet`'s.
        cascades: as `mri_transformer`'s.
        data_consistency: as `mri_transformer`'s.
        channels: the complex channels `C` (the network sees `2C` real
            ones).
        mask: as `mri_transformer`'s.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model` with `mri_transformer`'s inputs and
        output.

    Example:
        >>> model = real_unet(image_size=16, filters=3, depth=2)
        >>> model.output_shape
        (None, 16, 16, 2)
    """
    size, channels, cascades, data_consistency, mask = _common(
        image_size, channels, cascades, data_consistency, mask
    )
    width = check.greater_than(filters, "filters")
    if round(width) < 1:
        raise ValueError(
            f"`filters` must round to at least 1. Received: filters={filters!r}"
        )
    size, _, depth = _unet_arguments(size, max(1, round(width)), depth, pooling)
    layers = keras.layers
    pool_layer = (
        layers.MaxPooling2D if pooling == "max" else layers.AveragePooling2D
    )

    def network(x, k):
        def convolution(channels_out, kernel, label):
            return layers.Conv2D(
                channels_out, kernel, padding="same", name=f"{label}_{k}"
            )

        def join(skip, x, channels_out, label):
            x = layers.Concatenate(name=f"{label}_join_{k}")([skip, x])
            return convolution(channels_out, 3, f"{label}_conv_0")(x)

        return _unet(
            x,
            depth,
            lambda level: max(1, round(width * 2**level)),
            convolution,
            lambda label: layers.ReLU(name=f"{label}_{k}"),
            lambda level: pool_layer(2, name=f"down_{level}_pool_{k}"),
            lambda channels_out, label: layers.Conv2DTranspose(
                channels_out, 2, strides=2, name=f"{label}_{k}"
            ),
            join,
            lambda h: layers.Conv2D(
                2 * channels,
                1,
                kernel_initializer="zeros",
                name=f"output_{k}",
            )(h),
        )

    return _model(
        network, size, channels, cascades, data_consistency, mask, name
    )
