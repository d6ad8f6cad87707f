"""The examples' statistics over seeds: the mean and sample std, and the
paired difference of two arms with its 95% Student's t interval (scipy's
quantiles when it is installed, a table otherwise). A part of the
examples, imported by them."""

import numpy as np

# Student's t, 97.5% quantiles for 1 ... 30 degrees of freedom (scipy's
# are used when it is installed).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)
T_975 += (2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101)
T_975 += (2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052)
T_975 += (2.048, 2.045, 2.042)


def t_quantile(df):
    """The 97.5% quantile of Student's t with `df` degrees of freedom."""
    try:
        from scipy import stats
    except ImportError:
        # Beyond 30 degrees of freedom the normal's 1.96 is within 2%.
        return T_975[df - 1] if df <= len(T_975) else 1.96
    return float(stats.t.ppf(0.975, df))


def paired(values, references):
    """Mean of `values - references` (paired by seed) and the half width
    of its 95% t interval (`None` for one seed)."""
    d = np.asarray(values) - np.asarray(references)
    if len(d) < 2:
        return float(d.mean()), None
    half = t_quantile(len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(half)


def mean_std(values):
    """Mean and sample std (ddof=1; `None` for one seed)."""
    values = np.asarray(values, float)
    if len(values) < 2:
        return float(values.mean()), None
    return float(values.mean()), float(values.std(ddof=1))
