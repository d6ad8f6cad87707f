"""Complex batch normalization by 2x2 whitening over the batch.

`ComplexBatchNormalization` whitens each complex feature by the 2x2
covariance of its (Re, Im) over every axis but the last (batch and
steps), then scales and shifts it, in Trabelsi et al.'s convention or in
the reference code's (the scale applied before the whitening, the moving
statistic the inverse square root itself), optionally with the statistics
of the global batch under a `tf.distribute` strategy. The statistics and
the 2x2 algebra are in `_whitening` (scale-invariant over the float range,
with an accurate determinant). Also importable from
`cvattn_keras.layers.normalization`.
"""

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx
from cvattn_keras.layers._whitening import _check_choice
from cvattn_keras.layers._whitening import _check_epsilon
from cvattn_keras.layers._whitening import _exponent
from cvattn_keras.layers._whitening import _features
from cvattn_keras.layers._whitening import _global_max
from cvattn_keras.layers._whitening import _mix
from cvattn_keras.layers._whitening import _scale_sqrt
from cvattn_keras.layers._whitening import _stat_dtype
from cvattn_keras.layers._whitening import _whitening_statistics
from cvattn_keras.layers._whitening import whitening


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexBatchNormalization(keras.layers.Layer):
    """Complex batch normalization by 2x2 whitening, in two conventions.

    Statistics per complex feature over every axis but the last (batch and
    length). In training the batch statistics whiten the batch and update
    moving averages in Keras' sense
    (`moving = momentum * moving + (1 - momentum) * batch`); at inference
    the moving statistics are used, so the layer works before any training
    step.

    `convention="trabelsi"` (default; Trabelsi et al., "Deep Complex
    Networks", 2018): `y = G C^-1/2 (z - mean) + beta` with the biased
    covariance `C` of (Re, Im) plus `epsilon` on both variances. Variables:
    `moving_mean_real`, `moving_mean_imag`, and the moving covariance
    `moving_var_rr`, `moving_var_ii`, `moving_cov_ri` (initially `I / 2`,
    the covariance of a standard complex normal), non-trainable; the scale
    `G = [[gamma_rr, gamma_ri], [gamma_ri, gamma_ii]]` initialised
    `I / sqrt(2)` (output complex variance 1) and the complex
    `beta_real`, `beta_imag`. Inference whitens by
    `(C_moving + epsilon I)^-1/2`.

    `convention="reference"`: the reference implementation's
    `Complex_BatchNorm1d` (Eilers & Jiang's code), so that its checkpoints
    load and behave the same. Variances unbiased (divisor `N - 1`, `N` the
    number of unmasked samples) plus `epsilon` (the reference adds 1e-9:
    pass `epsilon=1e-9`), the covariance biased (divisor `N`);
    `R = C^-1/2`, and

        y = R sqrtm(Gamma) (z - mean) + bias,

    in this order (the 2x2 product `R sqrtm(Gamma)` is applied to the
    centred data), with `Gamma = [[w0^2, rho], [rho, w1^2]]`,
    `rho = (2 sigmoid(w2) - 1) |w0 w1|` as in `ComplexLayerNormalization`.
    The moving statistics are the mean and `R` itself, the inverse square
    root (as the reference stores them), a full 2x2 per feature; inference
    computes `y = R_moving sqrtm(Gamma) (z - moving_mean) + bias` with no
    epsilon (R is already inverted). Variables: trainable `w0`, `w1`, `w2`
    (initialised 1, 1, 0: Gamma = I), `bias_real`, `bias_imag` (zeros);
    non-trainable `moving_mean_real`, `moving_mean_imag` (zeros) and
    `moving_whitening_rr`, `moving_whitening_ri`, `moving_whitening_ir`,
    `moving_whitening_ii` (initially the identity, the reference's
    placeholder), meaning `R = [[rr, ri], [ir, ii]]`:
    `y_r = rr a + ri b`, `y_i = ir a + ii b` for `(a, b)` the real and
    imaginary parts it is applied to. The reference's momentum 0.5 is the
    same in either sense: pass `momentum=0.5`. Known differences from the
    reference, on purpose: (1) it skips the layer in training when the batch
    size is 1 (returns its input); here a batch of one sample is normalized
    over its length like any other; (2) its first training step stores the
    batch statistics without averaging; here every step averages with the
    moving statistics (initially zero mean and identity `R`); (3) a batch
    with fewer than 2 unmasked samples has no unbiased variance (the
    reference never gets one: it skips batches of one sample): here its
    variances are the biased ones (0) plus epsilon, its output is the bias
    (its centred data are 0), and the moving statistics stay unchanged;
    (4) the statistics are computed scale-invariantly (below), where the
    reference's overflow or lose precision for improper features; (5)
    `sqrtm(Gamma)` of a singular Gamma (`|w2|` large) uses a floor of 1e-12
    on its determinant, as in `ComplexLayerNormalization`.

    `epsilon` is added to both variances; the reference uses 1e-9. Steps
    masked by Keras masking (or `mask`) are left out of the statistics; a
    training batch with no unmasked step (or an empty batch, B = 0) leaves
    the moving statistics unchanged. The training statistics are computed on
    data rescaled by powers of two, with an accurate (pivoted) determinant:
    the training outputs are scale-invariant over the whole float range.

    The moving statistics are stored in the variables' dtype (float32), so
    at inference the Trabelsi covariance of inputs above about 1e19 is not
    representable; the reference convention's `R`, about 1 / scale, is
    (down to about 1e-38, inputs up to about 1e38).

    `synchronized=True`, as in `keras.layers.BatchNormalization`: under a
    `tf.distribute` strategy the batch mean and 2x2 covariance (and the
    counts of unmasked steps) are all-reduced over the replicas, so every
    replica whitens with the statistics of the global batch, as one device
    would. It uses `keras.ops.moments(..., synchronized=True)` and keeps the
    two-pass accuracy (center, then second moments). It is a no-op outside
    a strategy, and on JAX and PyTorch: under `keras.distribution` (JAX)
    arrays are global, so the statistics already are (Keras' own batch
    norm says the same); a model saved with it loads on every backend.
    With the reference convention, the `N` of the unbiased correction is
    then the mean over replicas of their numbers of unmasked samples (the
    number of replicas is not visible to `keras.ops`): with `K` replicas of
    equal batches the variances are `n / (n - 1)` times the biased ones,
    `n = N_global / K`, instead of `N_global / (N_global - 1)`, a relative
    difference of about `(K - 1) / N_global`.

    Args:
        momentum: float in [0, 1). Defaults to `0.99`.
        epsilon: positive float. Defaults to `1e-5`.
        center: whether to use the bias (`beta` / `bias`). Defaults to
            `True`.
        scale: whether to use the scale (`G` / `Gamma`). Defaults to
            `True`.
        synchronized: whether to reduce the batch statistics over the
            replicas of a `tf.distribute` strategy. Defaults to `False`.
        convention: `"trabelsi"` (default) or `"reference"`, above.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(B, ..., 2E)` stacked.

        training: batch statistics (and updates) when `True`.

        mask: optional boolean `(B, ...)`, False for padded steps.
    """

    # Calls `_tracing.quantize` in quantization-aware training (counted by
    # `quantization.quantize_model`).
    _quantization_points = True

    CONVENTIONS = ("trabelsi", "reference")

    def __init__(
        self,
        momentum=0.99,
        epsilon=1e-5,
        center=True,
        scale=True,
        synchronized=False,
        convention="trabelsi",
        **kwargs,
    ):
        momentum = check.rate(momentum, "momentum")
        epsilon = _check_epsilon(epsilon)
        if not isinstance(synchronized, bool):
            raise ValueError(
                "`synchronized` must be True or False. "
                f"Received: synchronized={synchronized!r}"
            )
        _check_choice(convention, self.CONVENTIONS, "convention")
        super().__init__(**kwargs)
        self.synchronized = synchronized
        self.convention = convention
        self.supports_masking = True
        self.autocast = False
        self.momentum = float(momentum)
        self.epsilon = epsilon
        self.center = bool(center)
        self.scale = bool(scale)

    def build(self, input_shape):
        features = _features(input_shape, "ComplexBatchNormalization")
        shape = (features,)

        def weight(name, init, trainable=True):
            return self.add_weight(
                name=name,
                shape=shape,
                initializer=init,
                trainable=trainable,
                autocast=False,
            )

        if self.convention == "reference":
            self._build_reference(weight)
            return
        half = keras.initializers.Constant(0.5)
        self.moving_mean_real = weight("moving_mean_real", "zeros", False)
        self.moving_mean_imag = weight("moving_mean_imag", "zeros", False)
        self.moving_var_rr = weight("moving_var_rr", half, False)
        self.moving_var_ii = weight("moving_var_ii", half, False)
        self.moving_cov_ri = weight("moving_cov_ri", "zeros", False)
        if self.scale:
            gain = keras.initializers.Constant(2**-0.5)
            self.gamma_rr = weight("gamma_rr", gain)
            self.gamma_ii = weight("gamma_ii", gain)
            self.gamma_ri = weight("gamma_ri", "zeros")
        if self.center:
            self.beta_real = weight("beta_real", "zeros")
            self.beta_imag = weight("beta_imag", "zeros")

    def _build_reference(self, weight):
        self.moving_mean_real = weight("moving_mean_real", "zeros", False)
        self.moving_mean_imag = weight("moving_mean_imag", "zeros", False)
        for name, init in (
            ("rr", "ones"),
            ("ri", "zeros"),
            ("ir", "zeros"),
            ("ii", "ones"),
        ):
            name = f"moving_whitening_{name}"
            setattr(self, name, weight(name, init, False))
        if self.scale:
            self.w0 = weight("w0", "ones")
            self.w1 = weight("w1", "ones")
            self.w2 = weight("w2", "zeros")
        if self.center:
            self.bias_real = weight("bias_real", "zeros")
            self.bias_imag = weight("bias_imag", "zeros")

    def call(self, inputs, training=False, mask=None):
        dtype = _stat_dtype(self)
        x = ops.cast(inputs, dtype)

        def weight(variable):
            return ops.cast(variable, dtype)

        # Quantization-aware training freezes the statistics (an integer
        # file's, and `_tracing.quantize`'s points, are the inference ones).
        training = training and not _tracing.quantizing()
        q = _tracing.quantize  # the identity outside quantization-aware
        if self.convention == "reference":
            real, imag = self._reference(x, training, mask)
            return ops.cast(
                _tracing.quantize_concatenated([real, imag]), self.compute_dtype
            )
        if training:
            (real, imag), stats, count = self._batch_whitening(x, mask)
            moving = (
                self.moving_mean_real,
                self.moving_mean_imag,
                self.moving_var_rr,
                self.moving_var_ii,
                self.moving_cov_ri,
            )
            # A batch with no unmasked step (or B = 0) has no statistics:
            # the moving ones stay as they are.
            self._update_moving(moving, stats, count > 0, dtype)
        else:
            real, imag = cx.split(x)  # (B, ..., E) each
            real = q(real - weight(self.moving_mean_real))
            imag = q(imag - weight(self.moving_mean_imag))
            v_rr, v_ii = weight(self.moving_var_rr), weight(self.moving_var_ii)
            v_ri = weight(self.moving_cov_ri)
            w_rr, w_ii, w_ri = whitening(v_rr, v_ii, v_ri, self.epsilon)
            real, imag = _mix(real, imag, w_rr, w_ri, w_ri, w_ii)
        # From here `real, imag` are not quantized yet (see `_mix`).
        if self.scale:
            g_rr, g_ii, g_ri = (
                weight(g) for g in (self.gamma_rr, self.gamma_ii, self.gamma_ri)
            )
            real, imag = _mix(q(real), q(imag), g_rr, g_ri, g_ri, g_ii)
        if self.center:
            real = q(real) + weight(self.beta_real)
            imag = q(imag) + weight(self.beta_imag)
        return ops.cast(
            _tracing.quantize_concatenated([real, imag]), self.compute_dtype
        )

    def _update_moving(self, variables, values, keep, dtype):
        """`moving = momentum * moving + (1 - momentum) * value` for each
        pair, computed in `dtype`, where `keep` holds; elsewhere the
        moving statistics stay as they are."""
        for variable, value in zip(variables, values):
            old = ops.cast(variable, dtype)
            updated = self.momentum * old + (1.0 - self.momentum) * value
            updated = ops.where(keep, updated, old)
            variable.assign(ops.cast(updated, variable.dtype))

    def _scale_matrix(self, dtype):
        """`sqrtm(Gamma)` entries `(p, q, r)` (reference convention)."""
        w0, w1, w2 = (ops.cast(w, dtype) for w in (self.w0, self.w1, self.w2))
        return _scale_sqrt(w0, w1, w2)

    def _reference(self, x, training, mask):
        """The reference convention: `(real, imag)` of the output."""
        dtype = keras.backend.standardize_dtype(x.dtype)
        q = _tracing.quantize  # the identity outside quantization-aware

        def weight(variable):
            return ops.cast(variable, dtype)

        moving = (
            self.moving_mean_real,
            self.moving_mean_imag,
            self.moving_whitening_rr,
            self.moving_whitening_ri,
            self.moving_whitening_ir,
            self.moving_whitening_ii,
        )
        if training:
            (real, imag), stats, number = self._batch_whitening(x, mask)
            mean_r, mean_i, _, _, _, w_rr, w_ii, w_ri = stats
            # The batch's R is symmetric: ri = ir.
            batch = (mean_r, mean_i, w_rr, w_ri, w_ri, w_ii)
            # Fewer than 2 unmasked samples: no unbiased variance, the
            # moving statistics stay as they are.
            self._update_moving(moving, batch, number > 1, dtype)
        else:
            real, imag = cx.split(x)  # (B, ..., E) each
            real = q(real - weight(self.moving_mean_real))
            imag = q(imag - weight(self.moving_mean_imag))
            rr, ri, ir, ii = (weight(v) for v in moving[2:])
            if self.scale:
                # The reference's product R sqrtm(Gamma) per feature, then
                # one 2x2 product over the data.
                p, s, r = self._scale_matrix(dtype)
                rr, ri, ir, ii = (
                    rr * p + ri * r,
                    rr * r + ri * s,
                    ir * p + ii * r,
                    ir * r + ii * s,
                )
            real, imag = _mix(real, imag, rr, ri, ir, ii)
        if self.center:
            real = q(real) + weight(self.bias_real)
            imag = q(imag) + weight(self.bias_imag)
        return real, imag

    def _batch_whitening(self, x, mask):
        """Whitens the stacked `x` by the batch statistics. Returns the
        whitened `(real, imag)`, the statistics `(mean_r, mean_i, v_rr,
        v_ii, v_ri)` in the data's units and the number of unmasked steps
        (with sync, their fraction of the global batch): 0 when there are
        none.

        With the reference convention, the output is `R sqrtm(Gamma) (x -
        mean)`, the statistics are followed by the entries `(w_rr, w_ii,
        w_ri)` of `R` in the data's units, and the number is `N`, the
        number of unmasked samples (with sync, its mean over the
        replicas)."""
        dtype = keras.backend.standardize_dtype(x.dtype)
        axes = tuple(range(len(x.shape) - 1))
        sync = self.synchronized and keras.backend.backend() == "tensorflow"
        if mask is None:
            keep = None
            weights = ops.ones_like(x[..., :1])
        else:
            keep = ops.expand_dims(ops.cast(mask, "bool"), -1)
            weights = ops.cast(keep, dtype)

        def kept(x):
            # `where`, not a product: padding may hold inf or NaN.
            return x if keep is None else ops.where(keep, x, 0.0)

        def reduce_sum(x):
            # With sync, means over the global batch: mean(w x) / mean(w).
            if sync:
                return ops.moments(x, axes, synchronized=True)[0]
            return ops.sum(x, axis=axes)

        count = reduce_sum(weights)  # (1,)
        safe = ops.where(count > 0, count, ops.ones_like(count))

        def mean(*tensors):
            if not sync:
                return [reduce_sum(kept(t)) / safe for t in tensors]
            # One all-reduce for all of them.
            joined = ops.concatenate([kept(t) for t in tensors], axis=-1)
            return ops.split(reduce_sum(joined) / safe, len(tensors), -1)

        # The scale from the stacked input (one pass), then per feature.
        top = ops.max(kept(ops.abs(x)), axis=axes, initial=0.0)
        # (2E,); Keras' torch backend returns a scalar for an empty batch.
        top = ops.broadcast_to(top, (x.shape[-1],))
        k0 = _exponent(ops.maximum(*cx.split(top)), dtype)
        if sync:
            k0 = _global_max(k0, dtype)
        real, imag = cx.split(x)  # (B, ..., E) each
        if self.convention != "reference":
            whitened, stats = _whitening_statistics(
                real, imag, mean, k0, self.epsilon
            )
            return whitened, stats, count
        number = count
        if sync:
            # The mean over replicas of their numbers of unmasked samples:
            # one number per replica, all-reduced.
            local = ops.expand_dims(ops.sum(weights, axis=axes), 0)
            number = ops.moments(local, (0,), synchronized=True)[0]
        # Unbiased variances: the biased ones inflated by 1 / (N - 1);
        # N < 2 has none (the centred data are 0): no inflation.
        several = number > 1
        inflation = ops.where(
            several, 1.0 / ops.where(several, number - 1.0, 1.0), 0.0
        )
        scale = self._scale_matrix(dtype) if self.scale else None
        whitened, stats = _whitening_statistics(
            real,
            imag,
            mean,
            k0,
            self.epsilon,
            inflation,
            scale=scale,
            inverse=True,
        )
        return whitened, stats, number

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "synchronized": self.synchronized,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "convention": self.convention,
        }
