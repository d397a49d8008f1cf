"""pymc-marketing's MMM: geometric adstock, logistic saturation, three channels, two
controls, yearly seasonality; two years of weekly synthetic data (seeded)."""

import numpy as np
import pandas as pd
from pymc_marketing.mmm import MMM, GeometricAdstock, LogisticSaturation

N_WEEKS = 104
CHANNELS = ["tv", "radio", "search"]
CONTROLS = ["holiday", "price"]


def data(seed: int = 0) -> tuple[pd.DataFrame, pd.Series]:
    """Spend per channel, the controls and sales: the channels' adstocked, saturated spend
    plus the controls' effects, a trend and noise."""
    rng = np.random.default_rng(seed)
    dates = pd.date_range("2023-01-02", periods=N_WEEKS, freq="W-MON")
    X = pd.DataFrame({"date": dates})
    for k, channel in enumerate(CHANNELS):
        X[channel] = rng.gamma(2.0, 1.0 + k, N_WEEKS) * (rng.random(N_WEEKS) < 0.8)
    X["holiday"] = (rng.random(N_WEEKS) < 0.1).astype(float)
    X["price"] = 1.0 + 0.1 * rng.standard_normal(N_WEEKS)
    effect = sum(np.tanh(X[c].to_numpy() / (2.0 + k)) * (1.0 + k) for k, c in enumerate(CHANNELS))
    y = 5.0 + 0.01 * np.arange(N_WEEKS) + effect + 0.8 * X["holiday"] - 1.5 * X["price"]
    return X, pd.Series(y + 0.3 * rng.standard_normal(N_WEEKS), name="y")


def build_model():
    X, y = data()
    mmm = MMM(date_column="date", channel_columns=CHANNELS, control_columns=CONTROLS,
              adstock=GeometricAdstock(l_max=8), saturation=LogisticSaturation(),
              yearly_seasonality=2)
    mmm.build_model(X, y)
    model = mmm.model
    return model, model.initial_point()
