"""The NIST StRD nonlinear least-squares problems of higher difficulty, for benchmarks.

Source: NIST Statistical Reference Datasets (StRD), Nonlinear Regression,
https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml, one data file per problem at
https://www.itl.nist.gov/div898/strd/nls/data/LINKS/DATA/<Name>.dat. Every problem that NIST
rates "Higher Level of Difficulty" is here: MGH09, Thurber, BoxBOD, Rat42, MGH10, Eckerle4,
Rat43, Bennett5. The data (y, x), both starting points, the certified parameters with their
standard deviations, the certified residual sum of squares, the residual standard deviation
and the degrees of freedom are NIST's numbers as printed in those files; the data blocks below
keep NIST's rows ("y x", in NIST's order and digits), only the spacing differs.

`problem.model(b, x)` is NIST's model y = f(x; b) as a JAX function (pass `xp=np` to evaluate
it in NumPy); `residuals(b, problem)` is y - f(x; b), the vector whose sum of squares NIST
certifies. tests/interop/test_nist_data.py checks every transcription: the sum of squares at the
certified parameters, in float64, equals the certified one to 8 significant digits or better.
"""

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True, eq=False)
class NistProblem:
    """One NIST StRD problem: y = model(b, x) + e, fitted by least squares.

    `start1`, `start2`: NIST's Start 1 and Start 2. `certified`, `certified_sd`: the certified
    parameters b1, b2, ... and their standard deviations. `certified_rss`: the certified
    residual sum of squares; `residual_sd` = sqrt(certified_rss / degrees_of_freedom) and
    `degrees_of_freedom` = observations - parameters, both as NIST prints them.
    """

    name: str
    formula: str  # NIST's model line
    model: Callable
    x: np.ndarray
    y: np.ndarray
    start1: np.ndarray
    start2: np.ndarray
    certified: np.ndarray
    certified_sd: np.ndarray
    certified_rss: float
    residual_sd: float
    degrees_of_freedom: int

    @property
    def num_observations(self) -> int:
        return int(self.y.shape[0])

    @property
    def num_params(self) -> int:
        return int(self.certified.shape[0])

    @property
    def starts(self) -> dict[str, np.ndarray]:
        """{"start1": ..., "start2": ...}, NIST's two starting points."""
        return {"start1": self.start1, "start2": self.start2}


def residuals(params, problem: NistProblem, xp=jnp):
    """y - model(params, x): the residual vector of `problem` at `params` (NumPy with
    `xp=np`)."""
    return problem.y - problem.model(params, problem.x, xp)


def rss(params, problem: NistProblem, xp=jnp):
    """The residual sum of squares sum_i (y_i - model(params, x_i))^2."""
    r = residuals(params, problem, xp)
    return xp.sum(r * r)


# ---------------------------------------------------------------------------------- the models
# b = (b1, b2, ...), NIST's parameters; x: the predictor (an array); xp: jax.numpy or numpy.


def _mgh09(b, x, xp=jnp):
    return b[0] * (x**2 + x * b[1]) / (x**2 + x * b[2] + b[3])


def _thurber(b, x, xp=jnp):
    numerator = b[0] + b[1] * x + b[2] * x**2 + b[3] * x**3
    return numerator / (1 + b[4] * x + b[5] * x**2 + b[6] * x**3)


def _boxbod(b, x, xp=jnp):
    return b[0] * (1 - xp.exp(-b[1] * x))


def _rat42(b, x, xp=jnp):
    return b[0] / (1 + xp.exp(b[1] - b[2] * x))


def _mgh10(b, x, xp=jnp):
    return b[0] * xp.exp(b[1] / (x + b[2]))


def _eckerle4(b, x, xp=jnp):
    return (b[0] / b[1]) * xp.exp(-0.5 * ((x - b[2]) / b[1]) ** 2)


def _rat43(b, x, xp=jnp):
    return b[0] / (1 + xp.exp(b[1] - b[2] * x)) ** (1 / b[3])


def _bennett5(b, x, xp=jnp):
    return b[0] * (b[1] + x) ** (-1 / b[2])


def _columns(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) from NIST's rows "y x"."""
    rows = np.array(text.split(), dtype=np.float64).reshape(-1, 2)
    return rows[:, 1].copy(), rows[:, 0].copy()


def _problem(name, formula, model, data, **numbers) -> NistProblem:
    """A `NistProblem` from NIST's rows "y x" and its numbers (tuples become float64 arrays)."""
    x, y = _columns(data)
    for key, value in numbers.items():
        if isinstance(value, tuple):
            numbers[key] = np.array(value, dtype=np.float64)
    return NistProblem(name, formula, model, x, y, **numbers)


# ------------------------------------------------------------------------------------ the data
# Each block: NIST's data lines, response y first, predictor x second.

_MGH09_DATA = """
1.957000E-01  4.000000E+00
1.947000E-01  2.000000E+00
1.735000E-01  1.000000E+00
1.600000E-01  5.000000E-01
8.440000E-02  2.500000E-01
6.270000E-02  1.670000E-01
4.560000E-02  1.250000E-01
3.420000E-02  1.000000E-01
3.230000E-02  8.330000E-02
2.350000E-02  7.140000E-02
2.460000E-02  6.250000E-02
"""

_THURBER_DATA = """
  80.574E0  -3.067E0
  84.248E0  -2.981E0
  87.264E0  -2.921E0
  87.195E0  -2.912E0
  89.076E0  -2.840E0
  89.608E0  -2.797E0
  89.868E0  -2.702E0
  90.101E0  -2.699E0
  92.405E0  -2.633E0
  95.854E0  -2.481E0
 100.696E0  -2.363E0
 101.060E0  -2.322E0
 401.672E0  -1.501E0
 390.724E0  -1.460E0
 567.534E0  -1.274E0
 635.316E0  -1.212E0
 733.054E0  -1.100E0
 759.087E0  -1.046E0
 894.206E0  -0.915E0
 990.785E0  -0.714E0
1090.109E0  -0.566E0
1080.914E0  -0.545E0
1122.643E0  -0.400E0
1178.351E0  -0.309E0
1260.531E0  -0.109E0
1273.514E0  -0.103E0
1288.339E0   0.010E0
1327.543E0   0.119E0
1353.863E0   0.377E0
1414.509E0   0.790E0
1425.208E0   0.963E0
1421.384E0   1.006E0
1442.962E0   1.115E0
1464.350E0   1.572E0
1468.705E0   1.841E0
1447.894E0   2.047E0
1457.628E0   2.200E0
"""

_BOXBOD_DATA = """
109   1
149   2
149   3
191   5
213   7
224  10
"""

_RAT42_DATA = """
 8.930E0   9.000E0
10.800E0  14.000E0
18.590E0  21.000E0
22.330E0  28.000E0
39.350E0  42.000E0
56.110E0  57.000E0
61.730E0  63.000E0
64.620E0  70.000E0
67.080E0  79.000E0
"""

_MGH10_DATA = """
3.478000E+04  5.000000E+01
2.861000E+04  5.500000E+01
2.365000E+04  6.000000E+01
1.963000E+04  6.500000E+01
1.637000E+04  7.000000E+01
1.372000E+04  7.500000E+01
1.154000E+04  8.000000E+01
9.744000E+03  8.500000E+01
8.261000E+03  9.000000E+01
7.030000E+03  9.500000E+01
6.005000E+03  1.000000E+02
5.147000E+03  1.050000E+02
4.427000E+03  1.100000E+02
3.820000E+03  1.150000E+02
3.307000E+03  1.200000E+02
2.872000E+03  1.250000E+02
"""

_ECKERLE4_DATA = """
0.0001575E0  400.000000E0
0.0001699E0  405.000000E0
0.0002350E0  410.000000E0
0.0003102E0  415.000000E0
0.0004917E0  420.000000E0
0.0008710E0  425.000000E0
0.0017418E0  430.000000E0
0.0046400E0  435.000000E0
0.0065895E0  436.500000E0
0.0097302E0  438.000000E0
0.0149002E0  439.500000E0
0.0237310E0  441.000000E0
0.0401683E0  442.500000E0
0.0712559E0  444.000000E0
0.1264458E0  445.500000E0
0.2073413E0  447.000000E0
0.2902366E0  448.500000E0
0.3445623E0  450.000000E0
0.3698049E0  451.500000E0
0.3668534E0  453.000000E0
0.3106727E0  454.500000E0
0.2078154E0  456.000000E0
0.1164354E0  457.500000E0
0.0616764E0  459.000000E0
0.0337200E0  460.500000E0
0.0194023E0  462.000000E0
0.0117831E0  463.500000E0
0.0074357E0  465.000000E0
0.0022732E0  470.000000E0
0.0008800E0  475.000000E0
0.0004579E0  480.000000E0
0.0002345E0  485.000000E0
0.0001586E0  490.000000E0
0.0001143E0  495.000000E0
0.0000710E0  500.000000E0
"""

_RAT43_DATA = """
 16.08E0   1.0E0
 33.83E0   2.0E0
 65.80E0   3.0E0
 97.20E0   4.0E0
191.55E0   5.0E0
326.20E0   6.0E0
386.87E0   7.0E0
520.53E0   8.0E0
590.03E0   9.0E0
651.92E0  10.0E0
724.93E0  11.0E0
699.56E0  12.0E0
689.96E0  13.0E0
637.56E0  14.0E0
717.41E0  15.0E0
"""

_BENNETT5_DATA = """
-34.834702E0   7.447168E0
-34.393200E0   8.102586E0
-34.152901E0   8.452547E0
-33.979099E0   8.711278E0
-33.845901E0   8.916774E0
-33.732899E0   9.087155E0
-33.640301E0   9.232590E0
-33.559200E0   9.359535E0
-33.486801E0   9.472166E0
-33.423100E0   9.573384E0
-33.365101E0   9.665293E0
-33.313000E0   9.749461E0
-33.260899E0   9.827092E0
-33.217400E0   9.899128E0
-33.176899E0   9.966321E0
-33.139198E0  10.029280E0
-33.101601E0  10.088510E0
-33.066799E0  10.144430E0
-33.035000E0  10.197380E0
-33.003101E0  10.247670E0
-32.971298E0  10.295560E0
-32.942299E0  10.341250E0
-32.916302E0  10.384950E0
-32.890202E0  10.426820E0
-32.864101E0  10.467000E0
-32.841000E0  10.505640E0
-32.817799E0  10.542830E0
-32.797501E0  10.578690E0
-32.774300E0  10.613310E0
-32.757000E0  10.646780E0
-32.733799E0  10.679150E0
-32.716400E0  10.710520E0
-32.699100E0  10.740920E0
-32.678799E0  10.770440E0
-32.661400E0  10.799100E0
-32.644001E0  10.826970E0
-32.626701E0  10.854080E0
-32.612202E0  10.880470E0
-32.597698E0  10.906190E0
-32.583199E0  10.931260E0
-32.568699E0  10.955720E0
-32.554298E0  10.979590E0
-32.539799E0  11.002910E0
-32.525299E0  11.025700E0
-32.510799E0  11.047980E0
-32.499199E0  11.069770E0
-32.487598E0  11.091100E0
-32.473202E0  11.111980E0
-32.461601E0  11.132440E0
-32.435501E0  11.152480E0
-32.435501E0  11.172130E0
-32.426800E0  11.191410E0
-32.412300E0  11.210310E0
-32.400799E0  11.228870E0
-32.392101E0  11.247090E0
-32.380501E0  11.264980E0
-32.366001E0  11.282560E0
-32.357300E0  11.299840E0
-32.348598E0  11.316820E0
-32.339901E0  11.333520E0
-32.328400E0  11.349940E0
-32.319698E0  11.366100E0
-32.311001E0  11.382000E0
-32.299400E0  11.397660E0
-32.290699E0  11.413070E0
-32.282001E0  11.428240E0
-32.273300E0  11.443200E0
-32.264599E0  11.457930E0
-32.256001E0  11.472440E0
-32.247299E0  11.486750E0
-32.238602E0  11.500860E0
-32.229900E0  11.514770E0
-32.224098E0  11.528490E0
-32.215401E0  11.542020E0
-32.203800E0  11.555380E0
-32.198002E0  11.568550E0
-32.189400E0  11.581560E0
-32.183601E0  11.594420E0
-32.174900E0  11.607121E0
-32.169102E0  11.619640E0
-32.163300E0  11.632000E0
-32.154598E0  11.644210E0
-32.145901E0  11.656280E0
-32.140099E0  11.668200E0
-32.131401E0  11.679980E0
-32.125599E0  11.691620E0
-32.119801E0  11.703130E0
-32.111198E0  11.714510E0
-32.105400E0  11.725760E0
-32.096699E0  11.736880E0
-32.090900E0  11.747890E0
-32.088001E0  11.758780E0
-32.079300E0  11.769550E0
-32.073502E0  11.780200E0
-32.067699E0  11.790730E0
-32.061901E0  11.801160E0
-32.056099E0  11.811480E0
-32.050301E0  11.821700E0
-32.044498E0  11.831810E0
-32.038799E0  11.841820E0
-32.033001E0  11.851730E0
-32.027199E0  11.861550E0
-32.024300E0  11.871270E0
-32.018501E0  11.880890E0
-32.012699E0  11.890420E0
-32.004002E0  11.899870E0
-32.001099E0  11.909220E0
-31.995300E0  11.918490E0
-31.989500E0  11.927680E0
-31.983700E0  11.936780E0
-31.977900E0  11.945790E0
-31.972099E0  11.954730E0
-31.969299E0  11.963590E0
-31.963501E0  11.972370E0
-31.957701E0  11.981070E0
-31.951900E0  11.989700E0
-31.946100E0  11.998260E0
-31.940300E0  12.006740E0
-31.937401E0  12.015150E0
-31.931601E0  12.023490E0
-31.925800E0  12.031760E0
-31.922899E0  12.039970E0
-31.917101E0  12.048100E0
-31.911301E0  12.056170E0
-31.908400E0  12.064180E0
-31.902599E0  12.072120E0
-31.896900E0  12.080010E0
-31.893999E0  12.087820E0
-31.888201E0  12.095580E0
-31.885300E0  12.103280E0
-31.882401E0  12.110920E0
-31.876600E0  12.118500E0
-31.873699E0  12.126030E0
-31.867901E0  12.133500E0
-31.862101E0  12.140910E0
-31.859200E0  12.148270E0
-31.856300E0  12.155570E0
-31.850500E0  12.162830E0
-31.844700E0  12.170030E0
-31.841801E0  12.177170E0
-31.838900E0  12.184270E0
-31.833099E0  12.191320E0
-31.830200E0  12.198320E0
-31.827299E0  12.205270E0
-31.821600E0  12.212170E0
-31.818701E0  12.219030E0
-31.812901E0  12.225840E0
-31.809999E0  12.232600E0
-31.807100E0  12.239320E0
-31.801300E0  12.245990E0
-31.798401E0  12.252620E0
-31.795500E0  12.259200E0
-31.789700E0  12.265750E0
-31.786800E0  12.272240E0
"""


# name -> problem, in the order of NIST's list of higher-difficulty problems.
PROBLEMS: dict[str, NistProblem] = {
    "MGH09": _problem(
        "MGH09",
        "y = b1*(x**2+x*b2) / (x**2+x*b3+b4)  +  e",
        _mgh09,
        _MGH09_DATA,
        start1=(25, 39, 41.5, 39),
        start2=(0.25, 0.39, 0.415, 0.39),
        certified=(1.9280693458e-01, 1.9128232873e-01, 1.2305650693e-01, 1.3606233068e-01),
        certified_sd=(1.1435312227e-02, 1.9633220911e-01, 8.0842031232e-02, 9.0025542308e-02),
        certified_rss=3.0750560385e-04,
        residual_sd=6.6279236551e-03,
        degrees_of_freedom=7,
    ),
    "Thurber": _problem(
        "Thurber",
        "y = (b1 + b2*x + b3*x**2 + b4*x**3) / (1 + b5*x + b6*x**2 + b7*x**3)  +  e",
        _thurber,
        _THURBER_DATA,
        start1=(1000, 1000, 400, 40, 0.7, 0.3, 0.03),
        start2=(1300, 1500, 500, 75, 1, 0.4, 0.05),
        certified=(
            1.2881396800e03,
            1.4910792535e03,
            5.8323836877e02,
            7.5416644291e01,
            9.6629502864e-01,
            3.9797285797e-01,
            4.9727297349e-02,
        ),
        certified_sd=(
            4.6647963344e00,
            3.9571156086e01,
            2.8698696102e01,
            5.5675370270e00,
            3.1333340687e-02,
            1.4984928198e-02,
            6.5842344623e-03,
        ),
        certified_rss=5.6427082397e03,
        residual_sd=1.3714600784e01,
        degrees_of_freedom=30,
    ),
    "BoxBOD": _problem(
        "BoxBOD",
        "y = b1*(1-exp[-b2*x])  +  e",
        _boxbod,
        _BOXBOD_DATA,
        start1=(1, 1),
        start2=(100, 0.75),
        certified=(2.1380940889e02, 5.4723748542e-01),
        certified_sd=(1.2354515176e01, 1.0455993237e-01),
        certified_rss=1.1680088766e03,
        residual_sd=1.7088072423e01,
        degrees_of_freedom=4,
    ),
    "Rat42": _problem(
        "Rat42",
        "y = b1 / (1+exp[b2-b3*x])  +  e",
        _rat42,
        _RAT42_DATA,
        start1=(100, 1, 0.1),
        start2=(75, 2.5, 0.07),
        certified=(7.2462237576e01, 2.6180768402e00, 6.7359200066e-02),
        certified_sd=(1.7340283401e00, 8.8295217536e-02, 3.4465663377e-03),
        certified_rss=8.0565229338e00,
        residual_sd=1.1587725499e00,
        degrees_of_freedom=6,
    ),
    "MGH10": _problem(
        "MGH10",
        "y = b1 * exp[b2/(x+b3)]  +  e",
        _mgh10,
        _MGH10_DATA,
        start1=(2, 400000, 25000),
        start2=(0.02, 4000, 250),
        certified=(5.6096364710e-03, 6.1813463463e03, 3.4522363462e02),
        certified_sd=(1.5687892471e-04, 2.3309021107e01, 7.8486103508e-01),
        certified_rss=8.7945855171e01,
        residual_sd=2.6009740065e00,
        degrees_of_freedom=13,
    ),
    "Eckerle4": _problem(
        "Eckerle4",
        "y = (b1/b2) * exp[-0.5*((x-b3)/b2)**2]  +  e",
        _eckerle4,
        _ECKERLE4_DATA,
        start1=(1, 10, 500),
        start2=(1.5, 5, 450),
        certified=(1.5543827178e00, 4.0888321754e00, 4.5154121844e02),
        certified_sd=(1.5408051163e-02, 4.6803020753e-02, 4.6800518816e-02),
        certified_rss=1.4635887487e-03,
        residual_sd=6.7629245447e-03,
        degrees_of_freedom=32,
    ),
    "Rat43": _problem(
        "Rat43",
        "y = b1 / ((1+exp[b2-b3*x])**(1/b4))  +  e",
        _rat43,
        _RAT43_DATA,
        start1=(100, 10, 1, 1),
        start2=(700, 5, 0.75, 1.3),
        certified=(6.9964151270e02, 5.2771253025e00, 7.5962938329e-01, 1.2792483859e00),
        certified_sd=(1.6302297817e01, 2.0828735829e00, 1.9566123451e-01, 6.8761936385e-01),
        certified_rss=8.7864049080e03,
        residual_sd=2.8262414662e01,
        degrees_of_freedom=9,
    ),
    "Bennett5": _problem(
        "Bennett5",
        "y = b1 * (b2+x)**(-1/b3)  +  e",
        _bennett5,
        _BENNETT5_DATA,
        start1=(-2000, 50, 0.8),
        start2=(-1500, 45, 0.85),
        certified=(-2.5235058043e03, 4.6736564644e01, 9.3218483193e-01),
        certified_sd=(2.9715175411e02, 1.2448871856e00, 2.0272299378e-02),
        certified_rss=5.2404744073e-04,
        residual_sd=1.8629312528e-03,
        degrees_of_freedom=151,
    ),
}
