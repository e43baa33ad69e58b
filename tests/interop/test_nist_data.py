"""The NIST StRD problems of benchmarks/nist_problems.py are transcribed right: at the certified
parameters the residual sum of squares, in NumPy float64, equals NIST's certified value to 8
significant digits or better (relative difference <= 5e-9), and the counts of observations and
parameters are NIST's. Source: https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import nist_problems as nist

# name -> (observations, parameters), from the header of NIST's file ("Data:", "Model:").
NIST_SIZES = {
    "MGH09": (11, 4),
    "Thurber": (37, 7),
    "BoxBOD": (6, 2),
    "Rat42": (9, 3),
    "MGH10": (16, 3),
    "Eckerle4": (35, 3),
    "Rat43": (15, 4),
    "Bennett5": (154, 3),
}

# 8 significant digits: |computed / certified - 1| <= 5e-9.
RTOL = 5e-9


def test_the_higher_difficulty_set():
    assert list(nist.PROBLEMS) == list(NIST_SIZES)


@pytest.mark.parametrize("name", list(NIST_SIZES))
def test_sizes(name):
    p = nist.PROBLEMS[name]
    observations, parameters = NIST_SIZES[name]
    assert p.x.shape == p.y.shape == (observations,)
    assert p.x.dtype == p.y.dtype == np.float64
    assert p.num_observations == observations and p.num_params == parameters
    for values in (p.start1, p.start2, p.certified, p.certified_sd):
        assert values.shape == (parameters,) and np.all(np.isfinite(values))
    assert np.all(np.isfinite(p.x)) and np.all(np.isfinite(p.y))
    # NIST prints 9 degrees of freedom for Rat43 where 15 - 4 = 11 (its printed residual
    # standard deviation is sqrt(RSS / 11): test_certified_residual_sd)
    expected_dof = 9 if name == "Rat43" else observations - parameters
    assert p.degrees_of_freedom == expected_dof


@pytest.mark.parametrize("name", list(NIST_SIZES))
def test_certified_rss(name):
    p = nist.PROBLEMS[name]
    rss = nist.rss(p.certified, p, np)
    assert isinstance(rss, np.float64)
    assert abs(rss / p.certified_rss - 1) <= RTOL, (rss, p.certified_rss)


@pytest.mark.parametrize("name", list(NIST_SIZES))
def test_certified_residual_sd(name):
    """NIST's residual standard deviation is sqrt(RSS / (observations - parameters))."""
    p = nist.PROBLEMS[name]
    sd = np.sqrt(p.certified_rss / (p.num_observations - p.num_params))
    assert abs(sd / p.residual_sd - 1) <= RTOL


@pytest.mark.parametrize("name", list(NIST_SIZES))
def test_starts_are_not_the_solution(name):
    """The two starts differ, and each has a finite sum of squares above the certified one."""
    p = nist.PROBLEMS[name]
    assert not np.array_equal(p.start1, p.start2)
    for start in (p.start1, p.start2):
        rss = nist.rss(start, p, np)
        assert np.isfinite(rss) and rss > p.certified_rss


def test_jax_model_matches_numpy():
    """The JAX form of each model, in float64, gives NumPy's residuals (the benchmarks use it)."""
    with jax.enable_x64(True):
        for p in nist.PROBLEMS.values():
            r_jax = np.asarray(nist.residuals(jnp.asarray(p.certified), p))
            r_np = nist.residuals(p.certified, p, np)
            assert r_jax.dtype == np.float64
            np.testing.assert_allclose(r_jax, r_np, rtol=1e-12, atol=1e-12 * np.abs(p.y).max())
