"""pymc-extras' structural time series: a local linear trend, a quarterly seasonal and
measurement error; its likelihood is the Kalman filter, a Scan over the 80 observations
(seeded synthetic data)."""

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
from pymc_extras.statespace import structural as st

N_OBS = 80


def data(seed: int = 0) -> pd.DataFrame:
    """Quarterly observations: a random walk with drift, a fixed seasonal pattern, noise."""
    rng = np.random.default_rng(seed)
    level = 10.0 + np.cumsum(0.1 + 0.2 * rng.standard_normal(N_OBS))
    season = np.tile([1.0, -0.5, 0.3, -0.8], N_OBS // 4 + 1)[:N_OBS]
    y = level + season + 0.3 * rng.standard_normal(N_OBS)
    index = pd.date_range("2000-01-01", periods=N_OBS, freq="QS")
    return pd.DataFrame({"data": y}, index=index)


def build_model():
    trend = st.LevelTrend(order=2, innovations_order=[1, 1])
    season = st.TimeSeasonality(season_length=4, innovations=False, name="season")
    ss = (trend + season + st.MeasurementError(name="obs")).build(verbose=False)
    k_states = len(ss.coords["state"])
    with pm.Model(coords=ss.coords) as model:
        pm.Normal("initial_level_trend", sigma=5.0, dims="state_level_trend")
        pm.HalfNormal("sigma_level_trend", sigma=0.5, dims="shock_level_trend")
        pm.Normal("params_season", sigma=1.0, dims="state_season")
        pm.HalfNormal("sigma_obs", sigma=0.5)
        P0_diag = pm.HalfNormal("P0_diag", sigma=2.0, shape=k_states)
        pm.Deterministic("P0", pt.diag(P0_diag), dims=("state", "state_aux"))
        ss.build_statespace_graph(data())
    return model, model.initial_point()
