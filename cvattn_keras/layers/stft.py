"""ComplexSTFT and ComplexISTFT: the waveform in and out of the model."""

import warnings

import keras
import numpy as np
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import stft as sf


def _constant(value):
    """An initializer that returns `value` (the DFT kernels)."""

    def initializer(shape, dtype=None):
        return ops.cast(value, dtype)

    return initializer


def as_stft(stft):
    """`stft` as a `ComplexSTFT`: the layer itself, the dict of its
    `get_config()` (named `"stft"` unless it says) or its serialized form
    (`keras.saving.serialize_keras_object`); a `ValueError` naming `stft`
    otherwise. For the builders and datasets that take `stft=`."""
    text = repr(stft)
    text = text if len(text) <= 200 else text[:197] + "..."
    if isinstance(stft, ComplexSTFT):
        return stft
    if isinstance(stft, dict):
        try:
            if "class_name" in stft:
                stft = keras.saving.deserialize_keras_object(stft)
            else:
                stft = ComplexSTFT.from_config({"name": "stft", **stft})
        except (TypeError, ValueError) as error:
            # Keras wraps the constructor's error in a TypeError.
            cause = error.__context__ if type(error) is TypeError else None
            raise ValueError(
                "`stft` must be a ComplexSTFT config that ComplexSTFT "
                f"accepts; it raised {type(cause or error).__name__}: "
                f"{cause or error} Received: stft={text}"
            ) from error
        if isinstance(stft, ComplexSTFT):
            return stft
    raise ValueError(
        "`stft` must be a `cvattn_keras.layers.ComplexSTFT`, the dict of its "
        f"`get_config()` or its serialized form. Received: stft={text}"
    )


def _window_config(window):
    return window if isinstance(window, str) else np.asarray(window).tolist()


class _STFTBase(keras.layers.Layer):
    """The arguments, their checks, the kernels and the config shared by
    the transform and its inverse."""

    _kernel_fn = None  # stft.dft_kernels or stft.inverse_dft_kernels

    def __init__(
        self,
        frame_length,
        frame_step,
        fft_length=None,
        window="hann",
        center=True,
        pad_mode="constant",
        bins=None,
        normalized=False,
        trainable=False,
        implementation="auto",
        allow_gaps=False,
        learn_kernels=None,
        **kwargs,
    ):
        allow_gaps = check.boolean(allow_gaps, "allow_gaps")
        sizes = sf.check_sizes(frame_length, frame_step, fft_length, allow_gaps)
        self.frame_length, self.frame_step, self.fft_length = sizes
        self._window = sf.window_array(window, self.frame_length)
        self.window = window if isinstance(window, str) else self._window
        self.center = check.boolean(center, "center")
        if pad_mode not in sf.PAD_MODES:
            raise ValueError(
                f"`pad_mode` must be one of {sf.PAD_MODES}. Received: "
                f"pad_mode={pad_mode!r}"
            )
        self.pad_mode = pad_mode
        self.bins = sf.resolve_bins(bins, self.fft_length)
        self.normalized = check.boolean(normalized, "normalized")
        if implementation not in sf.IMPLEMENTATIONS:
            raise ValueError(
                f"`implementation` must be one of {sf.IMPLEMENTATIONS}. "
                f"Received: implementation={implementation!r}"
            )
        trainable = check.boolean(trainable, "trainable")
        learn_kernels = check.boolean(
            trainable if learn_kernels is None else learn_kernels,
            "learn_kernels",
        )
        if learn_kernels and implementation == "fft":
            raise ValueError(
                "The FFT route has no kernels to learn: use "
                "implementation='conv' or 'auto' with trainable=True. "
                f"Received: implementation={implementation!r}"
            )
        # Whether the kernels are learned, fixed at construction (by
        # `trainable`, or `learn_kernels` from a config): a layer that
        # learns them keeps the convolution for good (saved so in its
        # config), frozen later or not; one built frozen keeps the DFT
        # (its kernels are non-trainable variables) when a parent model is
        # unfrozen.
        self._learn = learn_kernels
        self.implementation = "conv" if learn_kernels else implementation
        self.allow_gaps = allow_gaps
        # autocast=False: under mixed precision the waveform stays float32
        # (Keras would round it to float16 before `call`); see the class
        # docstrings.
        super().__init__(trainable=trainable, autocast=False, **kwargs)

    @property
    def num_bins(self):
        """`F`, the number of complex bins kept."""
        return self.bins[1] - self.bins[0]

    def _add_kernels(self):
        kernels = type(self)._kernel_fn(
            self._window, self.fft_length, self.bins, self.normalized
        )
        for name, value in zip(("kernel_real", "kernel_imag"), kernels):
            setattr(
                self,
                name,
                self.add_weight(
                    name=name,
                    shape=value.shape,
                    initializer=_constant(value),
                    dtype="float32",  # whatever the policy: see call
                    # Learned only if asked at construction; then frozen
                    # and unfrozen with the layer.
                    trainable=self._learn,
                ),
            )

    # Whether a TFLite file may hold this transform's FFT (RFFT2D): the
    # forward transform's, in float files; TFLite has no inverse FFT.
    _fft_in_tflite = False

    def _use_fft(self):
        """The route: the convolution when trainable, or traced for
        export (but an explicit "fft" in a float file, see ComplexSTFT)."""
        if self.implementation == "conv":
            return False
        if _tracing.exporting():
            return self._export_fft()
        if self.implementation == "fft":
            return True
        return self.fft_length >= sf.AUTO_FFT_MIN_LENGTH

    def _export_fft(self):
        """Whether a traced TFLite file takes the FFT route (RFFT2D): for
        the forward transform, in a float file, with a power-of-two
        `fft_length`; with "auto" also from `AUTO_RFFT2D_MIN_LENGTH`
        points. The convolution otherwise, with a warning when "fft" was
        asked."""
        power_of_two = not self.fft_length & (self.fft_length - 1)
        if self.implementation == "auto":
            return (
                self._fft_in_tflite
                and _tracing.float_activations()
                and power_of_two
                and self.fft_length >= sf.AUTO_RFFT2D_MIN_LENGTH
            )
        why = None
        if not self._fft_in_tflite:
            why = "no exported file holds an inverse FFT (TFLite has no IRFFT)"
        elif not _tracing.float_activations():
            why = (
                "this file cannot hold an FFT (a calibrated TFLite mode: "
                "RFFT2D has no integer kernel; or an ONNX file)"
            )
        elif not power_of_two:
            why = (
                "RFFT2D takes power-of-two lengths only (fft_length="
                f"{self.fft_length})"
            )
        if why is None:
            return True
        warnings.warn(
            f"{type(self).__name__} {self.name!r} (implementation='fft') "
            f"is exported as a convolution: {why}. The numbers are the "
            "same within float32 rounding.",
            stacklevel=2,
        )
        return False

    def _float32_kernels(self):
        return (
            ops.cast(self.kernel_real, "float32"),
            ops.cast(self.kernel_imag, "float32"),
        )

    def _names(self):
        return (
            f"window={_window_config(self.window)!r:.60}, frame_length="
            f"{self.frame_length}, frame_step={self.frame_step}, "
            f"fft_length={self.fft_length}"
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                # The layer's current state (frozen after construction or
                # not, as any Keras layer saves it), and whether its
                # kernels are weights that learn when it is trainable.
                "trainable": self.trainable,
                "learn_kernels": self._learn,
                "frame_length": self.frame_length,
                "frame_step": self.frame_step,
                "fft_length": self.fft_length,
                "window": _window_config(self.window),
                "center": self.center,
                "pad_mode": self.pad_mode,
                "bins": list(self.bins),
                "normalized": self.normalized,
                "implementation": self.implementation,
                "allow_gaps": self.allow_gaps,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexSTFT(_STFTBase):
    """The short-time Fourier transform of a waveform, stacked.

    `X[t, k] = sum_n x_pad[t * frame_step + n] w_N[n] exp(-2 pi i k n / N)`
    in numpy's and librosa's convention: `N = fft_length`, the window `w`
    of `frame_length` samples centred in the `N`-sample frame (`w_N`),
    `x_pad` the waveform padded by `N // 2` samples on each side when
    centred. With `center=True, pad_mode="reflect"` this is
    `keras.ops.stft(x, frame_length, frame_step, fft_length)`; with
    `center=False` it is `tf.signal.stft` when `fft_length ==
    frame_length`.

    Two implementations, the same numbers (within float32 rounding):

    - `"conv"`: a real DFT as one strided convolution against the kernels
      `kernel_real = w[n] cos(2 pi k n / N)`, `kernel_imag = -w[n] sin(2 pi
      k n / N)` `(frame_length, F)`: a builtin CONV_2D in a TFLite file,
      quantizable and delegate-friendly. `frame_length * 2F` weights (4.2
      M at 2048 points with every bin: keep only the `bins` needed).
    - `"fft"`: `keras.ops.stft` (framing, then `rfft` of each windowed
      frame) on the padded waveform.
    - `"auto"` (default): the convolution below `fft_length=256`
      (`stft.AUTO_FFT_MIN_LENGTH`), the FFT from there. Measured forward,
      compiled (XLA on TensorFlow, `jax.jit`), on a 2-core CPU, batch 8,
      32000 samples, hop `N / 4`, every bin (conv / fft, ms; `benchmarks/
      stft_crossover.py`): TensorFlow 64: 2.7 / 3.0, 128: 2.8 / 3.2, 256:
      3.3 / 3.0, 512: 5.1 / 3.0, 1024: 9.9 / 3.6, 2048: 21 / 4.2; JAX
      64: 2.9 / 3.8, 128: 1.8 / 2.1, 256: 2.5 / 2.1, 512: 4.1 / 2.2,
      1024: 8.3 / 2.5, 2048: 20 / 3.1 (the convolution's cost grows with
      the bins kept, the FFT's does not). The convolution always when the
      layer is trainable (the FFT route has no kernels to learn) and
      in a TFLite file (`cvattn_keras.export`) as below.

    In a TFLite file the FFT is the builtin RFFT2D (+ REAL, IMAG): float
    only (no integer kernel), power-of-two lengths only, no GPU-delegate
    kernel, and no weights (the convolution stores `frame_length * 2F`).
    `"auto"` takes it in float files (float32, float16, dynamic_int8)
    from `fft_length=512` (`stft.AUTO_RFFT2D_MIN_LENGTH`), a power of
    two, and the convolution otherwise (and in every calibrated, integer,
    mode). For the GPU delegate, build the layer with
    `implementation="conv"` (`export.gpu` names RFFT2D, REAL and IMAG
    among the ops it leaves to the CPU). `"fft"` asks for RFFT2D in any
    float file (a warning and the convolution where it cannot be: a
    calibrated mode, another length). Measured on LiteRT, one thread,
    one waveform of 16000 samples, hop `N / 4`, every bin (CONV_2D /
    RFFT2D, ms; `benchmarks/stft_crossover.py --litert`): 256: 0.41 /
    0.55, 512: 0.75 / 0.55, 1024: 1.65 / 0.58, 2048: 3.77 / 0.59. At the
    paper's size (4096 points, 2048 bins) the convolution's kernels are 67
    MB of a 125 MB float32 classifier file, RFFT2D's none (58 MB), and the
    file's real-time factor is 0.21 against 0.16 (one thread, batch 1;
    `benchmarks/waveform_export.py`).

    Precision: the transform always runs in float32, with float32 kernels,
    whatever the dtype policy (a 2048-point sum in float16 keeps about 3
    significant digits of the largest bin: bins 60 dB down are lost). The
    waveform is not autocast (`autocast=False`); the result is cast to the
    compute dtype.

    Args:
        frame_length: positive int, the window's length in samples.
        frame_step: positive int, the hop between frames. At most
            `frame_length` unless `allow_gaps=True`.
        **kwargs: the keyword arguments below, and the base `Layer`
            arguments (`name`, `dtype`, ...).

    Keyword Args:
        fft_length: positive int >= `frame_length`, the DFT's length `N`
            (`None`: `frame_length`). Any length for the convolution.
        window: `"hann"` (periodic, default), `"hamming"` (periodic),
            `"rectangular"`, or an array of `frame_length` numbers
            (saved in the config as a list).
        center: whether frame `t` is centred on sample `t * frame_step`
            (the waveform padded by `N // 2` on each side). Defaults to
            `True`.
        pad_mode: `"constant"` (zeros, default, librosa's) or `"reflect"`
            (`keras.ops.stft`'s), for the centring.
        bins: `(low, high)`, the bins kept (`0 <= low < high <= N // 2 +
            1`); `None` (default) keeps all `N // 2 + 1`.
        normalized: if `True`, the DFT is scaled by `1 / sqrt(N)` (as
            `torch.stft(normalized=True)`). Defaults to `False`.
        trainable: if `True`, the kernels `kernel_real`, `kernel_imag`
            are learned (initialised to the DFT's), and frozen or unfrozen
            with the layer afterwards. They are weights either way (in the
            `.keras` file), non-trainable ones when `False`: unfreezing a
            parent model (`model.trainable = True`) leaves such a layer
            the exact DFT, on its route. A layer built trainable takes the
            convolution for good (`implementation` becomes `"conv"`, in
            its config too), since its kernels may move away from the
            DFT's; `trainable=True` with `implementation="fft"` is a
            `ValueError`. The config holds the layer's current
            `trainable` (a learned front end frozen afterwards is saved,
            and reloads, frozen) and `learn_kernels`.
        learn_kernels: whether the kernels are weights that learn when the
            layer is trainable; `None` (default): `trainable`. Written in
            the config, so that a learned front end frozen after
            construction reloads frozen and unfreezes as it did.
        implementation: `"auto"`, `"conv"` or `"fft"`, as above (in
            training and in TFLite files).
        allow_gaps: allow `frame_step > frame_length`. Defaults to `False`.

    Input shape:
        `(B, L)` or `(B, L, 1)` float samples (integer samples are refused:
        scale them to floats, e.g. `x / 32768` for int16 PCM). Without
        centring `L >= fft_length`; with `pad_mode="reflect"`, `L >
        fft_length // 2` (checked wherever `L` is known).

    Output shape:
        `(B, frames, 2F)`, `[Re | Im]` on the last axis, `frames = 1 + (L +
        2 (N // 2) - N) // frame_step` centred (`1 + L // frame_step` for an
        even `N`), `1 + (L - N) // frame_step` otherwise.

    Masking: given a mask `(B, L)` of valid samples, the output mask `(B,
    frames)` marks frame `t` valid when its centre sample (`t *
    frame_step` centred, `t * frame_step + N // 2` otherwise) is valid;
    a centre past the end (the last centred frame when `frame_step`
    divides `L`) counts as the last sample, so a fully valid waveform
    gives fully valid frames.

    Examples:
        >>> stft = ComplexSTFT(512, 128, bins=(0, 100))
        >>> tuple(stft(keras.ops.zeros((2, 16000))).shape)  # 1 + 16000 // 128
        (2, 126, 200)
    """

    _kernel_fn = staticmethod(sf.dft_kernels)
    _fft_in_tflite = True

    def __init__(self, frame_length, frame_step, **kwargs):
        super().__init__(frame_length, frame_step, **kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        self._check_shape(input_shape)
        self._add_kernels()

    def _check_shape(self, input_shape):
        input_shape = tuple(input_shape)
        rank = len(input_shape)
        if rank not in (2, 3) or (rank == 3 and input_shape[-1] != 1):
            raise ValueError(
                "ComplexSTFT takes waveforms (batch, length) or (batch, "
                f"length, 1). Received: input_shape={input_shape}"
            )
        length = input_shape[1]
        if length is None:
            return
        if not self.center and length < self.fft_length:
            raise ValueError(
                "Without centring, ComplexSTFT needs waveforms of at least "
                f"fft_length={self.fft_length} samples (one frame); pad "
                "them or use center=True. Received: input_shape="
                f"{input_shape}"
            )
        if self.center and self.pad_mode == "reflect":
            if length <= self.fft_length // 2:
                raise ValueError(
                    "pad_mode='reflect' needs waveforms longer than "
                    f"fft_length // 2 = {self.fft_length // 2} samples; use "
                    "pad_mode='constant'. Received: input_shape="
                    f"{input_shape}"
                )

    def call(self, inputs):
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if "float" not in dtype:
            raise ValueError(
                "ComplexSTFT takes float samples; scale integer ones to "
                "floats first (e.g. x / 32768 for int16 PCM). Received: "
                f"inputs.dtype={dtype}"
            )
        self._check_shape(inputs.shape)
        if inputs.shape[0] == 0 and inputs.shape[1] is not None:
            # An empty batch, as compute_output_shape says (TensorFlow's
            # convolution returns its input, MirrorPad and torch's FFT
            # fail on it, JAX's STFT drops the batch axis).
            shape = self.compute_output_shape(inputs.shape)
            return ops.zeros(shape, self.compute_dtype)
        x = ops.cast(inputs, "float32")
        if len(x.shape) == 2:
            x = ops.expand_dims(x, -1)  # (B, L, 1): what the delegate pads
        if self.center:
            x = sf.pad_waveform(x, self.fft_length, self.pad_mode)
        if self._use_fft() and _tracing.float16_weights():
            # RFFT2D in a float16 TFLite file (every float constant
            # stored in float16): the window in two float16-exact parts,
            # so that the STFT computes in float32 there too.
            outputs = sf.stft_fft_for_export(
                x,
                self._window,
                self.frame_step,
                self.fft_length,
                self.bins,
                self.normalized,
            )
        elif self._use_fft():
            window = ops.convert_to_tensor(self._window, "float32")
            outputs = sf.stft_fft(
                x,
                window,
                self.frame_step,
                self.fft_length,
                self.bins,
                self.normalized,
            )
        else:
            outputs = sf.stft_conv(
                x, *self._float32_kernels(), self.frame_step, self.fft_length
            )
        return ops.cast(outputs, self.compute_dtype)  # (B, frames, 2F)

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        mask = ops.cast(mask, "bool")
        if len(mask.shape) == 3:
            mask = mask[..., 0]
        step = self.frame_step
        if self.center:
            # Centres at t * step, t < 1 + (L + 2 (N // 2) - N) // step.
            # The last sample's validity continues past the end: a
            # centre there (L % step == 0, even N) holds real samples.
            tail = ops.repeat(ops.cast(mask[:, -1:], "int32"), step, axis=1)
            mask = ops.concatenate([mask, ops.cast(tail, "bool")], axis=1)
            extra = step + self.fft_length - 2 * (self.fft_length // 2) - 1
            return mask[:, : (-extra if extra else None) : step]
        # Centres at t * step + N // 2 for t * step + N <= L.
        half = self.fft_length // 2
        rest = self.fft_length - half - 1
        return mask[:, half : (-rest if rest else None) : step]

    def compute_output_shape(self, input_shape):
        self._check_shape(input_shape)
        frames = sf.frame_count(
            input_shape[1], self.frame_step, self.fft_length, self.center
        )
        return (input_shape[0], frames, 2 * self.num_bins)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexISTFT(_STFTBase):
    """The inverse of `ComplexSTFT`: stacked frames back to a waveform.

    Each frame's inverse DFT (numpy's `irfft`, the imaginary parts of bins
    0 and `N / 2` ignored) is multiplied by the window, overlap-added at
    `frame_step`, and divided by the overlap-added squared window (the
    least-squares inverse, as `librosa.istft` and `torch.istft`; exact at
    the edges too, where `tf.signal.inverse_stft_window_fn` assumes full
    overlap). Two routes, as `ComplexSTFT`'s:

    - `"conv"`: one transposed convolution with the inverse-DFT kernels
      `kernel_real`, `kernel_imag` `(frame_length, F)` (a builtin
      TRANSPOSE_CONV in a TFLite file; TFLite has no IRFFT builtin).
    - `"fft"`: `keras.ops.irfft` of each frame, then an overlap-add by
      pads and adds (`stft.overlap_add`).
    - `"auto"` (default): as `ComplexSTFT`, the FFT from `fft_length=256`
      on, the convolution when trainable or traced for export. Measured
      as there (conv / fft, ms): TensorFlow 64: 4.4 / 4.0, 128: 4.6 / 5.5,
      256: 5.6 / 6.2, 512: 58 / 5.4, 1024: 71 / 4.3, 2048: 141 / 4.6; JAX
      64: 3.7 / 2.9, 128: 3.9 / 3.4, 256: 5.4 / 3.4, 512: 62 / 5.0, 1024:
      71 / 3.4, 2048: 149 / 3.9 (the transposed convolution slows down
      tenfold from 512 points).

    Then a division by the overlap-added squared window: with a static
    number of frames (always in a TFLite file) a product with its
    reciprocal, a constant, since integer kernels have no usable DIV.

    `ComplexISTFT(ComplexSTFT(x))` is `x` within float32 rounding when the
    arguments are the same and the window satisfies the NOLA condition
    (the overlap-added squared window has no zeros: periodic Hann with
    `frame_step <= frame_length // 2`, Hamming or rectangular windows with
    `frame_step <= frame_length`, ...); a `ValueError` naming the window
    and sizes otherwise, at construction. Centred, the last of the `1 +
    L // frame_step` frames can end before sample `L` (a rectangular or
    Hamming window with `frame_step = frame_length`, or any hop above
    about `fft_length // 2`): a `length` reaching samples that no frame's
    window covers is a `ValueError` naming those samples and the
    arguments (at build, or at the call where the frame count is known
    only then), not zeros there. Without centring, the samples that no
    window reaches (the first `(N - frame_length) // 2`, the first of a
    periodic Hann window, and the tail after the last frame, as
    `tf.signal.stft` drops it) come back as 0.

    `bins` short of all `N // 2 + 1` bins: the bins outside count as zero
    (the inverse of a band-limited spectrum), so the round trip then
    returns the waveform band-limited, not the waveform. `pad_mode` does
    not change the inverse (the padding is dropped).

    Precision: as `ComplexSTFT`, the inverse runs in float32 whatever the
    dtype policy, and the waveform is cast to the compute dtype.

    Args:
        frame_length: as `ComplexSTFT`'s (the same value inverts it).
        frame_step: as `ComplexSTFT`'s (the same value inverts it).
        length: the output's length in samples: the waveform is cut, or
            padded with zeros at the end, to it. `None` (default): `(T - 1)
            * frame_step` centred with an even `N` (`(T - 1) * frame_step +
            N - 2 (N // 2)` in general), `(T - 1) * frame_step + N`
            otherwise, for `T` frames: pass the STFT's input length to get
            it back exactly (a centred STFT of `L` samples has `1 + L //
            frame_step` frames).
        **kwargs: the keyword arguments below, and the base `Layer`
            arguments.

    Keyword Args:
        fft_length: as `ComplexSTFT`'s (the same values invert it).
        window: as `ComplexSTFT`'s.
        center: as `ComplexSTFT`'s.
        pad_mode: as `ComplexSTFT`'s.
        bins: as `ComplexSTFT`'s.
        normalized: as `ComplexSTFT`'s.
        trainable: as `ComplexSTFT`'s; `True` learns the inverse kernels
            (the envelope keeps the window).
        implementation: `"auto"`, `"conv"` or `"fft"`, as above (in
            training and in TFLite files).
        allow_gaps: as `ComplexSTFT`'s.

    Input shape:
        `(B, T, 2F)`, `[Re | Im]` on the last axis.

    Output shape:
        `(B, L)`.

    Examples:
        >>> istft = ComplexISTFT(512, 128, length=16000)
        >>> tuple(istft(keras.ops.zeros((2, 126, 514))).shape)
        (2, 16000)
    """

    _kernel_fn = staticmethod(sf.inverse_dft_kernels)

    def __init__(self, frame_length, frame_step, length=None, **kwargs):
        super().__init__(frame_length, frame_step, **kwargs)
        self.length = check.positive_int(length, "length", allow_none=True)
        sf.check_nola(self._window, self.frame_step, self._names())
        self._checked_frames = set()  # the frame counts _check_edges passed

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3 or input_shape[-1] != 2 * self.num_bins:
            raise ValueError(
                "ComplexISTFT takes stacked frames (batch, frames, 2F) with "
                f"F = {self.num_bins} bins (bins={self.bins}). Received: "
                f"input_shape={input_shape}"
            )
        self._check_edges(input_shape[1])
        self._add_kernels()

    def _check_edges(self, frames):
        """With a static frame count and centring, every output sample
        that a waveform giving `frames` frames holds (its first `length`,
        the rest being padding) must be reached by a window: the
        overlap-added squared window is checked there in float64, the
        edges included (where fewer frames overlap) and the tail past the
        last frame's window (zero there: the last centred frame can end
        before the waveform does). A `ValueError` naming the arguments
        otherwise: those samples would come back as zeros."""
        if frames is None or not self.center or frames < 1:
            return
        if frames in self._checked_frames:
            return
        envelope = sf.overlap_envelope(self._window, self.frame_step, frames)
        offset = sf.window_offset(self.frame_length, self.fft_length)
        start = self.fft_length // 2 - offset
        length = self.length or self._default_length(frames)
        # The longest waveform whose centred STFT has `frames` frames (one
        # sample more gives another frame): samples past it can only be
        # the zeros that `length` pads with.
        longest = self._default_length(frames + 1) - 1
        stop = start + min(length, longest)
        if stop > envelope.shape[0]:
            envelope = np.pad(envelope, (0, stop - envelope.shape[0]))
        lost = envelope[start:stop] <= sf.NOLA_TOLERANCE * envelope.max()
        if lost.any():
            first = int(np.argmax(lost))
            last = int(lost.shape[0] - 1 - np.argmax(lost[::-1]))
            raise ValueError(
                f"ComplexISTFT cannot rebuild samples {first} to {last} "
                f"({int(lost.sum())} samples) of the length={length} "
                f"waveform from {frames} centred frames: no frame's window "
                "reaches them (with center=True a waveform of L samples "
                "has 1 + L // frame_step frames, and the last one can end "
                "before sample L), so they would come back as zeros. Use a "
                "smaller frame_step, pad the waveform at the end before "
                "the STFT, or ask for a shorter length. Received: "
                f"{self._names()}, center=True, length={self.length}, "
                f"frames={frames}"
            )
        self._checked_frames.add(frames)

    def _default_length(self, frames):
        if frames is None:
            return None
        padded = (frames - 1) * self.frame_step + self.fft_length
        return padded - 2 * (self.fft_length // 2) if self.center else padded

    def call(self, inputs):
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if "float" not in dtype:
            raise ValueError(
                "ComplexISTFT takes float spectra, stacked [Re | Im]. "
                f"Received: inputs.dtype={dtype}"
            )
        if inputs.shape[1] is not None:
            # Known here only (a model built on `(None, 2F)` frames, run).
            self._check_edges(inputs.shape[1])
            if inputs.shape[0] == 0:  # an empty batch (the FFTs fail)
                shape = self.compute_output_shape(inputs.shape)
                return ops.zeros(shape, self.compute_dtype)
        x = ops.cast(inputs, "float32")  # (B, T, 2F)
        window = ops.convert_to_tensor(self._window, "float32")
        if self._use_fft():
            frames = sf.istft_fft(
                x,
                window,
                self.frame_step,
                self.fft_length,
                self.bins,
                self.normalized,
            )
        else:
            frames = sf.istft_conv(
                x, *self._float32_kernels(), self.frame_step
            )  # (B, (T - 1) * step + fl)
        signal = sf.normalize_and_trim(
            frames,
            self._window,
            self.frame_step,
            self.fft_length,
            self.center,
            self.length,
        )  # (B, L)
        return ops.cast(signal, self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        length = self.length or self._default_length(input_shape[1])
        return (input_shape[0], length)

    def get_config(self):
        config = super().get_config()
        config["length"] = self.length
        return config
