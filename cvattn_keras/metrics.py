"""Micro-averaged average precision, the paper's MusicNet metric."""

import keras
from keras import ops

__all__ = ["MicroAveragedPrecision"]


@keras.saving.register_keras_serializable(package="cvattn_keras")
class MicroAveragedPrecision(keras.metrics.Metric):
    """Average precision over all (sample, frame, note) decisions pooled.

    `AP = sum_k (R_k - R_k+1) P_k`: precision weighted by the recall gained
    at each threshold, from the highest score down (as
    `sklearn.metrics.average_precision_score(y.ravel(), p.ravel())`, the
    micro average the MusicNet papers report). Scores are binned into
    `num_thresholds` equal bins of [0, 1] and accumulated as histograms of
    positives and negatives, so the state is small and streaming; scores
    closer than one bin are tied, which moves AP by well under 1e-3 with
    the default 1000 bins.

    Args:
        num_thresholds: int >= 2, the bins of [0, 1]. Defaults to 1000.
        from_logits: whether predictions are logits (a sigmoid is applied).
            Defaults to `True`, as the models here output logits.
        name, dtype: as for any Keras metric.
    """

    def __init__(
        self,
        num_thresholds=1000,
        from_logits=True,
        name="micro_average_precision",
        dtype=None,
    ):
        if (
            isinstance(num_thresholds, bool)
            or not isinstance(num_thresholds, int)
            or num_thresholds < 2
        ):
            raise ValueError(
                "`num_thresholds` must be an int >= 2. "
                f"Received: num_thresholds={num_thresholds!r}"
            )
        super().__init__(name=name, dtype=dtype)
        self.num_thresholds = num_thresholds
        self.from_logits = bool(from_logits)
        self.positives = self.add_variable(
            shape=(num_thresholds,), initializer="zeros", name="positives"
        )
        self.negatives = self.add_variable(
            shape=(num_thresholds,), initializer="zeros", name="negatives"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        scores = ops.reshape(ops.cast(y_pred, "float32"), (-1,))
        if self.from_logits:
            scores = ops.sigmoid(scores)
        labels = ops.reshape(ops.cast(y_true, "float32"), (-1,))
        weight = ops.ones_like(labels)
        if sample_weight is not None:
            weight = ops.reshape(
                ops.broadcast_to(
                    ops.cast(sample_weight, "float32"), ops.shape(y_true)
                ),
                (-1,),
            )
        bins = ops.cast(
            ops.clip(
                ops.floor(scores * self.num_thresholds),
                0,
                self.num_thresholds - 1,
            ),
            "int32",
        )
        self.positives.assign_add(
            ops.bincount(
                bins, weights=labels * weight, minlength=self.num_thresholds
            )
        )
        self.negatives.assign_add(
            ops.bincount(
                bins,
                weights=(1.0 - labels) * weight,
                minlength=self.num_thresholds,
            )
        )

    def result(self):
        # Cumulative counts from the highest bin down: at threshold k, the
        # true and false positives of every score in bins >= k.
        tp = ops.flip(ops.cumsum(ops.flip(self.positives, 0)), 0)
        fp = ops.flip(ops.cumsum(ops.flip(self.negatives, 0)), 0)
        total = tp[0]
        precision = tp / ops.maximum(tp + fp, 1e-12)
        gained = self.positives / ops.maximum(total, 1e-12)  # R_k - R_k+1
        return ops.sum(gained * precision)

    def get_config(self):
        return {
            "num_thresholds": self.num_thresholds,
            "from_logits": self.from_logits,
            "name": self.name,
            "dtype": self.dtype,
        }
